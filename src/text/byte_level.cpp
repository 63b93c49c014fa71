#include "byte_level.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "unicode_regex.h"

namespace moe::text {
namespace {

// [256] the code point of each byte: printable ones stand for themselves, the others count up from 256.
const std::vector<char32_t>& byte_to_char() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, uint8_t>& char_to_byte() {
  static const std::unordered_map<std::string, uint8_t> table = [] {
    std::unordered_map<std::string, uint8_t> t;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      append_utf8(s, byte_to_char()[b]);
      t[s] = static_cast<uint8_t>(b);
    }
    return t;
  }();
  return table;
}

}  // namespace

std::string bytes_to_chars(std::string_view bytes) {
  std::string chars;
  for (unsigned char c : bytes) append_utf8(chars, byte_to_char()[c]);
  return chars;
}

std::optional<std::string> chars_to_bytes(std::string_view chars) {
  std::string bytes;
  for (size_t pos = 0; pos < chars.size();) {
    const size_t length = utf8_char_length(chars[pos]);
    auto it = char_to_byte().find(std::string(chars.substr(pos, length)));
    if (it == char_to_byte().end()) return std::nullopt;
    bytes += static_cast<char>(it->second);
    pos += length;
  }
  return bytes;
}

}  // namespace moe::text
