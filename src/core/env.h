#pragma once
// The strict readers of one environment variable that Knobs::from_env() (core/knobs.h) is built from: a
// value that is not one the setting takes is an error naming the variable, what it takes and what it sets,
// never a silent default. The engine reads its MOE_* settings through Knobs, not through these.

#include <cstdint>
#include <optional>
#include <string_view>

namespace moe {

// The integer in `name`, or nullopt where it is unset or empty. `meaning` says what it sets (for the error).
std::optional<int64_t> env_integer(const char* name, int64_t min, int64_t max, std::string_view meaning);
// `on` (true) or `off` (false) in `name`, or nullopt where it is unset or empty.
std::optional<bool> env_on_off(const char* name, std::string_view meaning);

}  // namespace moe
