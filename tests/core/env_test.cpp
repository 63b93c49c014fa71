// env_integer: unset or empty is "not given"; anything but a whole number in range is an error that names
// the variable, its range and what it sets.
#include "moe/core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

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

TEST(EnvOnOff, OnOffOrNotGiven) {
  ::unsetenv(kVar);
  EXPECT_EQ(env_on_off(kVar, "the test's switch"), std::nullopt);
  for (const auto& [value, want] : {std::pair{"on", true}, std::pair{"off", false}}) {
    ::setenv(kVar, value, 1);
    EXPECT_EQ(env_on_off(kVar, "the test's switch"), want) << value;
  }
  for (const char* value : {"1", "ON", "yes", "on "}) {
    ::setenv(kVar, value, 1);
    try {
      env_on_off(kVar, "the test's switch");
      ADD_FAILURE() << "expected moe::Error for " << value;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kVar), std::string::npos) << what;
      EXPECT_NE(what.find("on or off"), std::string::npos) << what;
    }
  }
  ::unsetenv(kVar);
}

}  // namespace
}  // namespace moe
