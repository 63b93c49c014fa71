// env_integer: unset or empty is "not given"; anything but a whole number in range is an error that names
// the variable, its range and what it sets.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "moe/core/check.h"
#include "scoped_env.h"

namespace moe {
namespace {

constexpr const char* kVar = "MOE_ENV_TEST_VALUE";

std::optional<int64_t> read_with(const char* value) {
  const test::ScopedEnv var(kVar);
  if (value == nullptr) {
    var.unset();
  } else {
    var.set(value);
  }
  return env_integer(kVar, 0, 100, "the test's count");
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
  const test::ScopedEnv var(kVar);
  var.unset();
  EXPECT_EQ(env_on_off(kVar, "the test's switch"), std::nullopt);
  for (const auto& [value, want] : {std::pair{"on", true}, std::pair{"off", false}}) {
    var.set(value);
    EXPECT_EQ(env_on_off(kVar, "the test's switch"), want) << value;
  }
  for (const char* value : {"1", "ON", "yes", "on "}) {
    var.set(value);
    try {
      env_on_off(kVar, "the test's switch");
      ADD_FAILURE() << "expected moe::Error for " << value;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kVar), std::string::npos) << what;
      EXPECT_NE(what.find("on or off"), std::string::npos) << what;
    }
  }
}

// The tests' own ScopedEnv (tests/support) puts back what it found: a value, or nothing.
TEST(ScopedEnv, PutsBackTheOldValueOrNothing) {
  ::setenv(kVar, "before", 1);
  {
    const test::ScopedEnv var(kVar, "inside");
    EXPECT_STREQ(std::getenv(kVar), "inside");
    var.unset();
    EXPECT_EQ(std::getenv(kVar), nullptr);
  }
  EXPECT_STREQ(std::getenv(kVar), "before");
  ::unsetenv(kVar);
  {
    const test::ScopedEnv var(kVar, "inside");
    EXPECT_STREQ(std::getenv(kVar), "inside");
  }
  EXPECT_EQ(std::getenv(kVar), nullptr);
}

}  // namespace
}  // namespace moe
