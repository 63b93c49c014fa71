#pragma once
// tokenizer.json's "added_tokens": tokens matched whole in the input before the model sees it
// (leftmost-longest; lstrip, rstrip, single_word), either in the raw text or, when marked normalized, in the
// normalised text.

#include <cstdint>
#include <string>
#include <vector>

#include "json_source.h"
#include "normalizers.h"
#include "vocabulary.h"

namespace moe::text {

// A run of input text (id -1) or one added token (its id, empty text).
struct Segment {
  std::string text;
  int32_t id;
  bool at_start;  // the text begins at offset 0 of the input
};

class AddedTokens {
 public:
  // Reads the list `j` (null: none) into `vocab`; the content of a normalized token goes through
  // `normalizer`.
  void parse(const Json& j, const JsonSource& source, Vocabulary& vocab, const Normalizer& normalizer);
  // `text` cut at the tokens matched before normalisation; `at_start` says `text` begins the input.
  std::vector<Segment> split_raw(const std::string& text, bool at_start) const {
    return split(text, at_start, raw_);
  }
  // Normalised `text` cut at the tokens marked normalized.
  std::vector<Segment> split_normalized(const std::string& text, bool at_start) const {
    return split(text, at_start, normalized_);
  }

 private:
  struct Token {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
  };
  static std::vector<Segment> split(const std::string& text, bool at_start, const std::vector<Token>& list);

  std::vector<Token> raw_, normalized_;  // longest content first; normalized_ hold normalised content
};

}  // namespace moe::text
