#include "decoders.h"

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "byte_level.h"
#include "unicode_regex.h"

namespace moe::text {
namespace {

// "<0xAB>" -> 0xAB; nothing for any other token.
std::optional<uint8_t> byte_token_value(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

}  // namespace

void Decoder::parse(const Json& j, const JsonSource& source) {
  if (j.is_null()) return;
  present_ = true;
  const auto type = source.need(j, "type", "decoder").get<std::string>();
  if (type == "Sequence") {
    for (const Json& d : source.need(j, "decoders", "decoder Sequence")) parse(d, source);
  } else if (type == "ByteLevel") {
    steps_.push_back(ByteLevel{});
  } else if (type == "Replace") {
    steps_.push_back(parse_replace(j, source, "decoder Replace"));
  } else if (type == "ByteFallback") {
    steps_.push_back(ByteFallback{});
  } else if (type == "Fuse") {
    steps_.push_back(Fuse{});
  } else if (type == "Strip") {
    auto count = [&](const char* key) {
      return j.contains(key)
                 ? static_cast<int>(json_int(j.at(key), 0, 1 << 20, fmt::format("decoder Strip {}", key)))
                 : 0;
    };
    steps_.push_back(
        Strip{source.need(j, "content", "decoder Strip").get<std::string>(), count("start"), count("stop")});
  } else if (type == "Metaspace") {
    steps_.push_back(Metaspace{j.value("replacement", std::string(kMetaspace)), parse_prepend_scheme(j)});
  } else {
    source.fail(
        fmt::format("unsupported decoder type '{}' (supported: Sequence, ByteLevel, Replace, ByteFallback, "
                    "Fuse, Strip, Metaspace)",
                    type));
  }
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (!present_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  for (const Step& step : steps_) tokens = apply(step, std::move(tokens));
  std::string text;
  for (const std::string& p : tokens) text += p;
  return text;
}

std::vector<std::string> Decoder::apply(const Step& step, std::vector<std::string> pieces) {
  if (std::holds_alternative<ByteLevel>(step)) {
    // A piece with a character outside GPT-2's map stays as it is; the bytes are then read as lossy UTF-8.
    std::string bytes;
    for (const std::string& p : pieces) bytes += chars_to_bytes(p).value_or(p);
    return {utf8_lossy(bytes)};
  }
  if (const auto* r = std::get_if<ReplaceText>(&step)) {
    for (std::string& p : pieces) p = r->pattern.replace(p, r->content);
    return pieces;
  }
  if (std::holds_alternative<ByteFallback>(step)) {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (is_valid_utf8(bytes))
        out.push_back(bytes);
      else
        for (size_t i = 0; i < bytes.size(); ++i) out.push_back("\xEF\xBF\xBD");  // one U+FFFD per byte
      bytes.clear();
    };
    for (std::string& p : pieces) {
      if (auto b = byte_token_value(p)) {
        bytes += static_cast<char>(*b);
      } else {
        flush();
        out.push_back(std::move(p));
      }
    }
    flush();
    return out;
  }
  if (std::holds_alternative<Fuse>(step)) {
    std::string fused;
    for (const std::string& p : pieces) fused += p;
    return {fused};
  }
  if (const auto* s = std::get_if<Strip>(&step)) {
    if (s->content.empty()) return pieces;  // nothing to strip (the library's content is one character)
    for (std::string& p : pieces) {
      size_t begin = 0, end = p.size();
      for (int i = 0; i < s->start && p.compare(begin, s->content.size(), s->content) == 0 && begin < end;
           ++i)
        begin += s->content.size();
      for (int i = 0; i < s->stop && end - begin >= s->content.size() &&
                      p.compare(end - s->content.size(), s->content.size(), s->content) == 0;
           ++i)
        end -= s->content.size();
      p = p.substr(begin, end - begin);
    }
    return pieces;
  }
  if (const auto* m = std::get_if<Metaspace>(&step)) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      // NOTE: as the library does, every replacement in the first token is dropped when a prefix was added.
      replace_all(pieces[i], m->replacement, i == 0 && m->scheme != PrependScheme::kNever ? "" : " ");
    }
    return pieces;
  }
  return pieces;
}

}  // namespace moe::text
