#include "unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "moe/core/check.h"

namespace moe::text {

UnicodeRegex::UnicodeRegex(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    MOE_FAIL("regex '{}' does not compile at offset {}: {}", pattern, error_offset,
             reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // NOTE: optional speed-up; the interpreter runs without it
  code_ = code;
}

UnicodeRegex::UnicodeRegex(UnicodeRegex&& other) noexcept : code_(std::exchange(other.code_, nullptr)) {}

UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&& other) noexcept {
  std::swap(code_, other.code_);
  return *this;
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> UnicodeRegex::find_all(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  MOE_CHECK(match != nullptr, "out of memory for regex match data");
  std::vector<std::pair<size_t, size_t>> found;
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                               PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(match);
      MOE_FAIL("regex match failed with PCRE2 error {}", rc);
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0], end = ovector[1];
    found.emplace_back(begin, end);
    // An empty match moves on by one character so that the scan always advances.
    pos = end > begin ? end : (end < text.size() ? end + utf8_char_length(text[end]) : text.size() + 1);
  }
  pcre2_match_data_free(match);
  return found;
}

size_t utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Bytes of the valid prefix of the UTF-8 sequence at text[pos] (its whole length when it is complete and
// valid), following the Unicode "maximal subpart" rule: the second byte's range depends on the lead byte.
size_t valid_prefix(std::string_view text, size_t pos, size_t* full_length) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead < 0x80) length = 1;
  else if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  }
  *full_length = length;
  if (length == 0) return 0;
  size_t n = 1;
  for (; n < length && pos + n < text.size(); ++n) {
    const auto c = static_cast<unsigned char>(text[pos + n]);
    if (n == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const size_t n = valid_prefix(text, pos, &length);
    if (length == 0 || n != length) return false;
    pos += length;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    size_t length = 0;
    const size_t n = valid_prefix(bytes, pos, &length);
    if (length != 0 && n == length) {
      out.append(bytes.substr(pos, length));
      pos += length;
    } else {
      append_utf8(out, U'\uFFFD');
      pos += n == 0 ? 1 : n;
    }
  }
  return out;
}

}  // namespace moe::text
