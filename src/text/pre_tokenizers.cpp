#include "pre_tokenizers.h"

#include <fmt/format.h>

#include <algorithm>

#include "byte_level.h"

namespace moe::text {
namespace {

// The regex of GPT-2's ByteLevel pre-tokenizer (use_regex = true).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

std::vector<std::string> split_by(std::string_view text,
                                  const std::vector<std::pair<size_t, size_t>>& matches,
                                  SplitBehavior behavior, bool invert) {
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [begin, end] : matches) {
    if (begin != prev) spans.push_back({prev, begin, invert});
    spans.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});

  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) kept.push_back(s);
      break;
    case SplitBehavior::kIsolated:
      kept = spans;
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty())
          kept.back().begin = it->begin;
        else
          kept.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  std::vector<std::string> pieces;
  for (const Span& s : kept)
    if (s.end > s.begin) pieces.emplace_back(text.substr(s.begin, s.end - s.begin));
  return pieces;
}

void PreTokenizer::parse(const Json& j, const JsonSource& source) {
  if (j.is_null()) return;
  const auto type = source.need(j, "type", "pre_tokenizer").get<std::string>();
  if (type == "Sequence") {
    for (const Json& p : source.need(j, "pretokenizers", "pre_tokenizer Sequence")) parse(p, source);
  } else if (type == "ByteLevel") {
    std::shared_ptr<UnicodeRegex> regex;
    if (j.value("use_regex", true)) regex = std::make_shared<UnicodeRegex>(kGpt2Pattern);
    steps_.push_back(ByteLevel{j.value("add_prefix_space", false), regex});
  } else if (type == "Split") {
    const auto behavior = source.need(j, "behavior", "pre_tokenizer Split").get<std::string>();
    const std::vector<std::pair<const char*, SplitBehavior>> names = {
        {"Removed", SplitBehavior::kRemoved},
        {"Isolated", SplitBehavior::kIsolated},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return behavior == n.first; });
    if (it == names.end()) source.fail(fmt::format("unknown Split behavior '{}'", behavior));
    steps_.push_back(
        Split{parse_pattern(source.need(j, "pattern", "pre_tokenizer Split"), source, "pre_tokenizer Split"),
              it->second, j.value("invert", false)});
  } else if (type == "Metaspace") {
    steps_.push_back(Metaspace{j.value("replacement", std::string(kMetaspace)), parse_prepend_scheme(j),
                               j.value("split", true)});
  } else if (type == "Digits") {
    Pattern digits{.literal = "",
                   .regex = std::make_shared<UnicodeRegex>(
                       j.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)")};
    steps_.push_back(Split{digits, SplitBehavior::kIsolated, false});
  } else {
    source.fail(fmt::format(
        "unsupported pre_tokenizer type '{}' (supported: Sequence, ByteLevel, Split, Metaspace, Digits)",
        type));
  }
}

std::vector<Piece> PreTokenizer::pre_tokenize(Piece whole) const {
  std::vector<Piece> pieces = {std::move(whole)};
  for (const Step& step : steps_) {
    std::vector<Piece> next;
    for (Piece& piece : pieces) {
      if (const auto* b = std::get_if<ByteLevel>(&step)) {
        std::string text = piece.text;
        if (b->add_prefix_space && !text.starts_with(' ')) text.insert(text.begin(), ' ');
        std::vector<std::string> parts = {text};
        if (b->regex) parts = split_by(text, b->regex->find_all(text), SplitBehavior::kIsolated, false);
        for (size_t i = 0; i < parts.size(); ++i)
          next.push_back({bytes_to_chars(parts[i]), piece.at_start && i == 0});
      } else if (const auto* s = std::get_if<Split>(&step)) {
        auto parts = split_by(piece.text, s->pattern.find_all(piece.text), s->behavior, s->invert);
        for (size_t i = 0; i < parts.size(); ++i)
          next.push_back({std::move(parts[i]), piece.at_start && i == 0});
      } else if (const auto* m = std::get_if<Metaspace>(&step)) {
        std::string text = piece.text;
        replace_all(text, " ", m->replacement);
        const bool prepend =
            m->scheme == PrependScheme::kAlways || (m->scheme == PrependScheme::kFirst && piece.at_start);
        if (prepend && !text.starts_with(m->replacement)) text = m->replacement + text;
        std::vector<std::string> parts = {text};
        if (m->split) {
          Pattern p{.literal = m->replacement, .regex = nullptr};
          parts = split_by(text, p.find_all(text), SplitBehavior::kMergedWithNext, false);
        }
        for (size_t i = 0; i < parts.size(); ++i)
          next.push_back({std::move(parts[i]), piece.at_start && i == 0});
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace moe::text
