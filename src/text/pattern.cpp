#include "pattern.h"

#include <fmt/format.h>

namespace moe::text {

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  if (regex) return regex->find_all(text);
  std::vector<std::pair<size_t, size_t>> found;
  if (literal.empty()) return found;
  for (size_t hit, pos = 0; (hit = text.find(literal, pos)) != std::string_view::npos;
       pos = hit + literal.size())
    found.emplace_back(hit, hit + literal.size());
  return found;
}

std::string Pattern::replace(std::string_view text, std::string_view content) const {
  std::string out;
  size_t pos = 0;
  for (auto [begin, end] : find_all(text)) {
    out.append(text.substr(pos, begin - pos));
    out.append(content);
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

Pattern parse_pattern(const Json& j, const JsonSource& source, const std::string& where) {
  Pattern p;
  if (j.contains("String"))
    p.literal = j.at("String").get<std::string>();
  else if (j.contains("Regex"))
    p.regex = std::make_shared<UnicodeRegex>(j.at("Regex").get<std::string>());
  else
    source.fail(fmt::format("{} pattern is neither String nor Regex", where));
  return p;
}

ReplaceText parse_replace(const Json& j, const JsonSource& source, const std::string& where) {
  return ReplaceText{parse_pattern(source.need(j, "pattern", where), source, where),
                     source.need(j, "content", where).get<std::string>()};
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out.append(to);
  }
  out.append(text, pos);
  text = std::move(out);
}

}  // namespace moe::text
