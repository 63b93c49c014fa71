#pragma once
// CLI11 checks whose messages a person can read: "must be > 0, got 0" rather than CLI11's range of all
// of DBL_MAX's digits.

#include <CLI/CLI.hpp>

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

}  // namespace moe::cli
