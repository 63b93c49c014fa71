#include "core/env.h"

#include <charconv>
#include <cstdlib>

#include "moe/core/check.h"

namespace moe {

std::optional<int64_t> env_integer(const char* name, int64_t min, int64_t max, std::string_view meaning) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  const std::string_view text(env);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  MOE_CHECK(error == std::errc() && end == text.data() + text.size() && value >= min && value <= max,
            "{}='{}': give {}, a whole number from {} to {}", name, text, meaning, min, max);
  return value;
}

std::optional<bool> env_on_off(const char* name, std::string_view meaning) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  const std::string_view text(env);
  MOE_CHECK(text == "on" || text == "off", "{}='{}': give on or off ({})", name, text, meaning);
  return text == "on";
}

}  // namespace moe
