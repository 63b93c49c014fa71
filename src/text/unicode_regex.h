#pragma once
// Unicode regular expressions for the tokenizer's pre-tokenizers (\p{L}, \p{N}, look-ahead, (?i:...)):
// PCRE2 in UTF mode with Unicode properties, which accepts the Oniguruma patterns of tokenizer.json files.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moe::text {

class UnicodeRegex {
 public:
  // Throws moe::Error with PCRE2's message and the offset when the pattern does not compile.
  explicit UnicodeRegex(const std::string& pattern);
  UnicodeRegex(UnicodeRegex&& other) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&& other) noexcept;
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;
  ~UnicodeRegex();

  // Byte ranges [begin, end) of the successive non-overlapping matches in `text` (valid UTF-8).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

// UTF-8 helpers.
bool is_valid_utf8(std::string_view text);
// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
size_t utf8_char_length(unsigned char lead);
// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, char32_t cp);
// The bytes as text, each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

}  // namespace moe::text
