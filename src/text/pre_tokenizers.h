#pragma once
// tokenizer.json's "pre_tokenizer": cuts normalised text into the pieces that BPE encodes one by one
// (Sequence, ByteLevel, Split, Metaspace, Digits).

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "json_source.h"
#include "metaspace.h"
#include "pattern.h"
#include "unicode_regex.h"

namespace moe::text {

// A piece of text during pre-tokenisation; `at_start` says it begins at offset 0 of the input (Metaspace's
// "first" scheme prepends only there).
struct Piece {
  std::string text;
  bool at_start;
};

// What a split does with the matches: drops them, keeps each alone, glues each to the piece before or after
// it, or glues runs of matches (and runs of non-matches) together.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The pieces of `text` cut at `matches` (sorted, non-overlapping byte ranges), as the library's split with
// the behaviour; `invert` makes the text between the matches the delimiters. Empty pieces are dropped.
std::vector<std::string> split_by(std::string_view text,
                                  const std::vector<std::pair<size_t, size_t>>& matches,
                                  SplitBehavior behavior, bool invert);

class PreTokenizer {
 public:
  // Appends the steps of pre_tokenizer `j` (null: none); an unsupported type is an error naming it.
  void parse(const Json& j, const JsonSource& source);
  // The pieces of `whole` after every step in order, each step applied to every piece of the one before.
  std::vector<Piece> pre_tokenize(Piece whole) const;

 private:
  struct ByteLevel {
    bool add_prefix_space;
    std::shared_ptr<UnicodeRegex> regex;  // GPT-2's pattern; null for use_regex = false
  };
  struct Split {
    Pattern pattern;
    SplitBehavior behavior;
    bool invert;
  };
  struct Metaspace {
    std::string replacement;
    PrependScheme scheme;
    bool split;
  };
  using Step = std::variant<ByteLevel, Split, Metaspace>;
  std::vector<Step> steps_;
};

}  // namespace moe::text
