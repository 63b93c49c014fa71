#pragma once
// tokenizer.json's "decoder": turns the tokens of ids back into text (Sequence, ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace), each step mapping the list of pieces to a new list, as the library
// does.

#include <string>
#include <variant>
#include <vector>

#include "json_source.h"
#include "metaspace.h"
#include "pattern.h"

namespace moe::text {

class Decoder {
 public:
  // Appends the steps of decoder `j` (null: no decoder); an unsupported type is an error naming it.
  void parse(const Json& j, const JsonSource& source);
  // The text of `tokens`: every step in order, then the pieces concatenated. Without a decoder the tokens are
  // joined with spaces, as the library does.
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct ByteLevel {};
  struct ByteFallback {};
  struct Fuse {};
  struct Strip {
    std::string content;
    int start, stop;  // how many `content` to strip at most from each end
  };
  struct Metaspace {
    std::string replacement;
    PrependScheme scheme;
  };
  using Step = std::variant<ByteLevel, ReplaceText, ByteFallback, Fuse, Strip, Metaspace>;
  static std::vector<std::string> apply(const Step& step, std::vector<std::string> pieces);

  bool present_ = false;  // the file has a decoder, even an empty Sequence
  std::vector<Step> steps_;
};

}  // namespace moe::text
