#pragma once
// The patterns of tokenizer.json's Replace and Split steps ({"String": ...} or {"Regex": ...}), and the
// Replace step itself, which the normaliser and the decoder share.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json_source.h"
#include "unicode_regex.h"

namespace moe::text {

struct Pattern {
  std::string literal;
  std::shared_ptr<UnicodeRegex> regex;  // set for a Regex pattern

  // Byte ranges [begin, end) of the successive non-overlapping matches; none for an empty literal.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // `text` with every match replaced by `content`.
  std::string replace(std::string_view text, std::string_view content) const;
};

// {"String": "..."} or {"Regex": "..."}; `where` names the step in errors.
Pattern parse_pattern(const Json& j, const JsonSource& source, const std::string& where);

// A Replace step: every match of `pattern` becomes `content`.
struct ReplaceText {
  Pattern pattern;
  std::string content;
};

// {"type": "Replace", "pattern": ..., "content": ...}; `where` is "normalizer Replace" or "decoder Replace".
ReplaceText parse_replace(const Json& j, const JsonSource& source, const std::string& where);

// Replaces every occurrence of `from` (non-empty) in `text` by `to`, in place.
void replace_all(std::string& text, std::string_view from, std::string_view to);

}  // namespace moe::text
