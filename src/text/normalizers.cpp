#include "normalizers.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <cstdlib>

#include "moe/core/check.h"

namespace moe::text {
namespace {

// Canonical composition (NFC) of UTF-8 text.
std::string nfc(const std::string& text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  MOE_CHECK(n >= 0, "NFC normalisation failed: {} (is the text valid UTF-8?)", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

void Normalizer::parse(const Json& j, const JsonSource& source) {
  if (j.is_null()) return;
  const auto type = source.need(j, "type", "normalizer").get<std::string>();
  if (type == "Sequence") {
    for (const Json& n : source.need(j, "normalizers", "normalizer Sequence")) parse(n, source);
  } else if (type == "Prepend") {
    steps_.push_back(Prepend{source.need(j, "prepend", "normalizer Prepend").get<std::string>()});
  } else if (type == "Replace") {
    steps_.push_back(parse_replace(j, source, "normalizer Replace"));
  } else if (type == "NFC") {
    steps_.push_back(Nfc{});
  } else {
    source.fail(
        fmt::format("unsupported normalizer type '{}' (supported: Sequence, Prepend, Replace, NFC)", type));
  }
}

std::string Normalizer::normalize(std::string text) const {
  for (const Step& step : steps_) {
    if (const auto* p = std::get_if<Prepend>(&step)) {
      if (!text.empty()) text = p->text + text;
    } else if (const auto* r = std::get_if<ReplaceText>(&step)) {
      text = r->pattern.replace(text, r->content);
    } else if (std::holds_alternative<Nfc>(step)) {
      text = nfc(text);
    }
  }
  return text;
}

}  // namespace moe::text
