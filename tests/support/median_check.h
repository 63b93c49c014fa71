#pragma once
// A bound on the median of a test's per-case errors: the per-case bounds catch gross failures, the median
// catches a small bias spread over every case.

#include <string>
#include <vector>

namespace moe::test {

// The median of `errors` within `bound`; no cases fails (an empty list must not pass by default).
void expect_median_within(std::vector<double> errors, double bound, const std::string& what);

}  // namespace moe::test
