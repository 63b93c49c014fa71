#include "moe/core/check.h"

#include <cstring>

namespace moe::detail {

void throw_error(const char* file, int line, std::string message) {
  const char* base = std::strrchr(file, '/');
  throw Error(std::move(message), fmt::format("{}:{}", base ? base + 1 : file, line));
}

}  // namespace moe::detail
