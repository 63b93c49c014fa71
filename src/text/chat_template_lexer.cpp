// Jinja source to tokens (see chat_template_lexer.h). The whitespace rules mirror jinja2's lexer regexes
// (block_end `-%}\s*` or `%}\n?`, comments alike, variables `-}}\s*` or `}}`) and its lstrip_blocks step,
// which strips the start of a line only when nothing but spaces stands between the line start and the tag.
#include "chat_template_lexer.h"

#include "chat_template_value.h"
#include "moe/core/check.h"

#include <algorithm>
#include <cctype>

namespace moe::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalise_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalise_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag_start(pos_);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      std::string text = src_.substr(pos_, tag - pos_);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        lstrip_line(text);
      }
      emit_data(std::move(text));
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        comment(tag);
      } else if (kind == '%' && raw_begin()) {
        raw(tag);
      } else {
        tag_body(kind == '%', tag);
      }
    }
    tokens_.push_back({Token::Kind::eof, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  // The line of `pos`; positions are asked for in nearly increasing order, so count on from the last one.
  int line_at(size_t pos) {
    if (pos < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(line_pos_),
                                         src_.begin() + static_cast<long>(pos), '\n'));
    line_pos_ = pos;
    return line_;
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // lstrip_blocks: drop the spaces between the line start and a block or comment tag.
  void lstrip_line(std::string& text) const {
    const size_t nl = text.rfind('\n');
    const size_t start = nl == std::string::npos ? 0 : nl + 1;
    if (start == 0 && !line_starting_) return;
    if (start == text.size()) return;
    for (size_t i = start; i < text.size(); ++i)
      if (!is_space(text[i])) return;
    text.resize(start);
  }

  void emit_data(std::string text) {
    if (!text.empty()) tokens_.push_back({Token::Kind::data, std::move(text), line_at(pos_)});
  }

  // After a tag end at `end` (one past the delimiter): `-` ate \s*, a block or comment ate one newline.
  void finish_tag(size_t end, char sign, bool trims_newline) {
    size_t p = end;
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (sign != '+' && trims_newline && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && src_[p - 1] == '\n';
    pos_ = p;
  }

  void comment(size_t tag) {
    const size_t end = src_.find("#}", pos_);
    MOE_CHECK(end != std::string::npos, "line {}: missing end of comment tag (#}})", line_at(tag));
    const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    finish_tag(end + 2, sign, true);
  }

  // `{% raw %}`: at pos_ (after "{%" and its sign), spaces, "raw", spaces, then "-%}" or "%}".
  bool raw_begin() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    pos_ = p;
    return true;
  }

  void raw(size_t tag) {
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 1)) {
      size_t p = at + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      char end_sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, at - pos_);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+') {
        lstrip_line(text);
      }
      emit_data(std::move(text));
      finish_tag(p + 2, end_sign, true);
      return;
    }
    MOE_FAIL("line {}: missing {{% endraw %}} for this raw block", line_at(tag));
  }

  void tag_body(bool block, size_t tag) {
    const int line = line_at(tag);
    depth_ = 0;
    tokens_.push_back({block ? Token::Kind::block_begin : Token::Kind::variable_begin, "", line});
    const char close = block ? '%' : '}';
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      MOE_CHECK(pos_ < src_.size(), "line {}: unclosed {} tag (missing {})", line, block ? "{%" : "{{",
                block ? "%}" : "}}");
      // The end delimiter, with its whitespace sign, is tried before any operator, but (as jinja2 does) only
      // outside brackets, so that `{{ {'a': {}}}` closes at the last braces.
      for (const char sign : {'-', '+', '\0'}) {
        if (depth_ > 0) break;
        if (sign == '+' && !block) continue;
        const size_t p = pos_ + (sign ? 1 : 0);
        if (sign && src_[pos_] != sign) continue;
        if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
          tokens_.push_back({block ? Token::Kind::block_end : Token::Kind::variable_end, "", line_at(pos_)});
          finish_tag(p + 2, sign, block);
          return;
        }
      }
      token_in_tag();
    }
  }

  void token_in_tag() {
    const int line = line_at(pos_);
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos_;
      while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      tokens_.push_back({Token::Kind::name, src_.substr(pos_, e - pos_), line});
      pos_ = e;
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      number(line);
      return;
    }
    if (c == '\'' || c == '"') {
      string_literal(line);
      return;
    }
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back({Token::Kind::op, op, line});
        pos_ += 2;
        return;
      }
    }
    static const std::string kOne = "+-/*%~[](){}<>=.:|,;";
    MOE_CHECK(kOne.find(c) != std::string::npos, "line {}: unexpected character '{}' in a tag", line, c);
    if (c == '(' || c == '[' || c == '{') ++depth_;
    if ((c == ')' || c == ']' || c == '}') && depth_ > 0) --depth_;
    tokens_.push_back({Token::Kind::op, std::string(1, c), line});
    ++pos_;
  }

  void digits(size_t& e) const {
    while (e < src_.size() &&
           (std::isdigit(static_cast<unsigned char>(src_[e])) ||
            (src_[e] == '_' && e + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e + 1])))))
      ++e;
  }

  void number(int line) {
    size_t e = pos_;
    digits(e);
    bool floating = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      floating = true;
      ++e;
      digits(e);
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        floating = true;
        e = x;
        digits(e);
      }
    }
    std::string text = src_.substr(pos_, e - pos_);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({floating ? Token::Kind::floating : Token::Kind::integer, std::move(text), line});
    pos_ = e;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A string literal, decoded as Python's unicode-escape decodes it (an unknown escape stays as written).
  void string_literal(int line) {
    const char quote = src_[pos_];
    std::string out;
    size_t p = pos_ + 1;
    for (;;) {
      MOE_CHECK(p < src_.size(), "line {}: unterminated string literal", line);
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      MOE_CHECK(p + 1 < src_.size(), "line {}: unterminated string literal", line);
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t k = 0; k < width; ++k) {
            const int h = p + k < src_.size() ? hex_value(src_[p + k]) : -1;
            MOE_CHECK(h >= 0, "line {}: truncated \\{} escape in a string literal", line, e);
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          p += width;
          append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k, ++p)
              cp = cp * 8 + static_cast<char32_t>(src_[p] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({Token::Kind::string, std::move(out), line});
    pos_ = p + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  int depth_ = 0;  // open brackets in the current tag
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace moe::chat
