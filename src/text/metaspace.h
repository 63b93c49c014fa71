#pragma once
// What the Metaspace pre-tokenizer and decoder share: the replacement character and when a prefix is added.

#include "json_source.h"

namespace moe::text {

constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581 "▁", the default replacement of a space

// When the Metaspace pre-tokenizer prepends the replacement: to every piece, to the piece at the start of the
// input only, or never (the decoder then keeps a leading one).
enum class PrependScheme { kAlways, kFirst, kNever };

// "prepend_scheme" ("always", "first", "never"), or the older "add_prefix_space" (true: always).
inline PrependScheme parse_prepend_scheme(const Json& j) {
  if (j.contains("prepend_scheme")) {
    const auto s = j.at("prepend_scheme").get<std::string>();
    return s == "first"   ? PrependScheme::kFirst
           : s == "never" ? PrependScheme::kNever
                          : PrependScheme::kAlways;
  }
  return j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

}  // namespace moe::text
