#include "added_tokens.h"

#include <algorithm>
#include <cctype>
#include <climits>

#include "unicode_regex.h"

namespace moe::text {
namespace {

bool is_word_char(std::string_view text, size_t pos) {
  const auto c = static_cast<unsigned char>(text[pos]);
  return c >= 0x80 || std::isalnum(c) || c == '_';
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

void AddedTokens::parse(const Json& j, const JsonSource& source, Vocabulary& vocab,
                        const Normalizer& normalizer) {
  if (j.is_null()) return;
  for (const Json& t : j) {
    Token token{source.need(t, "content", "added token").get<std::string>(),
                static_cast<int32_t>(
                    json_int(source.need(t, "id", "added token"), INT32_MIN, INT32_MAX, "added token id")),
                t.value("special", false),
                t.value("lstrip", false),
                t.value("rstrip", false),
                t.value("single_word", false),
                t.value("normalized", false)};
    vocab.set(token.id, token.content);
    vocab.set_special(token.id, token.special);
    if (token.content.empty()) continue;
    if (token.normalized) {
      token.content = normalizer.normalize(token.content);
      normalized_.push_back(token);
    } else {
      raw_.push_back(token);
    }
  }
  // Longest first, so that the first match at a position is the longest (leftmost-longest).
  for (auto* list : {&raw_, &normalized_})
    std::stable_sort(list->begin(), list->end(),
                     [](const Token& a, const Token& b) { return a.content.size() > b.content.size(); });
}

std::vector<Segment> AddedTokens::split(const std::string& text, bool at_start,
                                        const std::vector<Token>& list) {
  std::vector<Segment> out;
  size_t text_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Token* hit = nullptr;
    for (const Token& t : list) {
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      const size_t end = pos + t.content.size();
      if (t.single_word &&
          ((pos > 0 && is_word_char(text, pos - 1)) || (end < text.size() && is_word_char(text, end))))
        continue;
      hit = &t;
      break;
    }
    if (hit == nullptr) {
      pos += utf8_char_length(text[pos]);
      continue;
    }
    size_t begin = pos, end = pos + hit->content.size();
    if (hit->lstrip)
      while (begin > text_begin && is_space(text[begin - 1])) --begin;
    if (hit->rstrip)
      while (end < text.size() && is_space(text[end])) ++end;
    if (begin > text_begin)
      out.push_back({text.substr(text_begin, begin - text_begin), -1, at_start && text_begin == 0});
    out.push_back({"", hit->id, false});
    text_begin = pos = end;
  }
  if (text_begin < text.size()) out.push_back({text.substr(text_begin), -1, at_start && text_begin == 0});
  return out;
}

}  // namespace moe::text
