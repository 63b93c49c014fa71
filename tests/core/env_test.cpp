// env_integer: unset or empty is "not given"; anything but a whole number in range is an error that names
// the variable, its range and what it sets.
#include "moe/core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "moe/core/check.h"

namespace moe {
namespace {

constexpr const char* kVar = "MOE_ENV_TEST_VALUE";

std::optional<int64_t> read_with(const char* value) {
  if (value == nullptr) {
    ::unsetenv(kVar);
  } else {
    ::setenv(kVar, value, 1);
  }
  try {
    const auto got = env_integer(kVar, 0, 100, "the test's count");
    ::unsetenv(kVar);
    return got;
  } catch (...) {
    ::unsetenv(kVar);
    throw;
  }
}

TEST(EnvInteger, UnsetOrEmptyIsNotGiven) {
  EXPECT_EQ(read_with(nullptr), std::nullopt);
  EXPECT_EQ(read_with(""), std::nullopt);
}

TEST(EnvInteger, ReadsWholeNumbersInRange) {
  EXPECT_EQ(read_with("0"), 0);
  EXPECT_EQ(read_with("42"), 42);
  EXPECT_EQ(read_with("100"), 100);
}

TEST(EnvInteger, AnythingElseIsAnErrorNamingTheVariable) {
  for (const char* value : {"abc", "12x", " 12", "12 ", "-1", "101", "1e2", "0x10", "99999999999999999999"}) {
    SCOPED_TRACE(value);
    try {
      read_with(value);
      FAIL() << "expected moe::Error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kVar), std::string::npos) << what;
      EXPECT_NE(what.find("0 to 100"), std::string::npos) << what;
      EXPECT_NE(what.find("the test's count"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace moe
