#include "median_check.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace moe::test {

void expect_median_within(std::vector<double> errors, double bound, const std::string& what) {
  ASSERT_FALSE(errors.empty()) << what << ": no cases";
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
  EXPECT_LE(errors[errors.size() / 2], bound) << what << ": median of " << errors.size() << " cases";
}

}  // namespace moe::test
