#pragma once
// Settings read from the environment (thread counts, kernel policy overrides), parsed strictly: a value
// that is not one the setting takes is an error naming the variable, what it takes and what it sets, never
// a silent default.

#include <cstdint>
#include <optional>
#include <string_view>

namespace moe {

// The integer in `name`, or nullopt where it is unset or empty. `meaning` says what it sets (for the error).
std::optional<int64_t> env_integer(const char* name, int64_t min, int64_t max, std::string_view meaning);
// `on` (true) or `off` (false) in `name`, or nullopt where it is unset or empty.
std::optional<bool> env_on_off(const char* name, std::string_view meaning);

}  // namespace moe
