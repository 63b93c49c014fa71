#pragma once
// GPT-2's reversible map from bytes to printable code points, which the ByteLevel pre-tokenizer applies and
// the ByteLevel decoder undoes.

#include <optional>
#include <string>
#include <string_view>

namespace moe::text {

// Each byte of `bytes` as its code point, in UTF-8 (" " -> "Ġ").
std::string bytes_to_chars(std::string_view bytes);
// The bytes of `chars`, or nothing when one of its characters is not in the map.
std::optional<std::string> chars_to_bytes(std::string_view chars);

}  // namespace moe::text
