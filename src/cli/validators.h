#pragma once
// CLI11 checks whose messages a person can read: "must be > 0, got 0" rather than CLI11's range of all
// of DBL_MAX's digits.

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <string>

namespace moe::cli {

// A number > 0.
inline const CLI::Validator kPositive(
    [](std::string& value) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(value, v)) return "must be a number > 0, got '" + value + "'";
      return v > 0 ? std::string() : "must be > 0, got " + value;
    },
    "> 0", "POSITIVE");

// A number >= 0.
inline const CLI::Validator kNonNegative(
    [](std::string& value) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(value, v)) return "must be a number >= 0, got '" + value + "'";
      return v >= 0 ? std::string() : "must be >= 0, got " + value;
    },
    ">= 0", "NONNEGATIVE");

// An integer in [min, 2^63): checked on the text, before CLI11 converts it (which saturates
// 9223372036854775808 to INT64_MAX).
inline CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec == std::errc::result_out_of_range || (ec == std::errc() && end == value.data() + value.size() && v < min))
          return "must be an integer in [" + std::to_string(min) + ", 2^63), got " + value;
        if (ec != std::errc() || end != value.data() + value.size()) return "must be an integer, got '" + value + "'";
        return std::string();
      },
      "", "INTEGER");
}

}  // namespace moe::cli
