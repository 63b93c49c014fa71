#pragma once
// The message of the moe::Error a call throws, for tests that check what an error names.

#include <gtest/gtest.h>

#include <string>

#include "moe/core/check.h"

namespace moe::test {

// The message of the moe::Error that `f` throws; fails the test when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no moe::Error was thrown";
  return "";
}

}  // namespace moe::test
