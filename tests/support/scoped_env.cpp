#include "scoped_env.h"

#include <cstdlib>

namespace moe::test {

ScopedEnv::ScopedEnv(const char* name) : name_(name) {
  if (const char* before = std::getenv(name)) {
    saved_ = before;
    had_ = true;
  }
}

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name) { set(value); }

ScopedEnv::~ScopedEnv() {
  if (had_) {
    ::setenv(name_.c_str(), saved_.c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

void ScopedEnv::set(const std::string& value) const { ::setenv(name_.c_str(), value.c_str(), 1); }

void ScopedEnv::unset() const { ::unsetenv(name_.c_str()); }

}  // namespace moe::test
