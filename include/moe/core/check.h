#pragma once
// Errors: every failure the user can cause becomes a moe::Error with a one-line message that names the
// problem and the fix. The source location is kept apart so that the CLI can print the message alone.

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moe {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string where) : std::runtime_error(std::move(message)), where_(std::move(where)) {}
  // "file:line" of the check that failed.
  const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, std::string message);
}  // namespace detail

}  // namespace moe

// MOE_CHECK(cond, "fmt string {}", args...): throws moe::Error when cond is false.
#define MOE_CHECK(cond, ...)                                                    \
  do {                                                                          \
    if (!(cond)) ::moe::detail::throw_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)

// MOE_FAIL("fmt string {}", args...): throws unconditionally.
#define MOE_FAIL(...) ::moe::detail::throw_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__))
