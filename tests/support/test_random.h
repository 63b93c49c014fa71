#pragma once
// Random inputs for tests: every test draws a fresh seed (MOE_TEST_SEED fixes it) and prints it on failure
// through a gtest scoped trace, so that a failing case can be replayed.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "moe/core/tensor.h"

namespace moe::test {

// A fresh seed per call, or MOE_TEST_SEED when set.
uint64_t fresh_seed();

// Usage: TestRng rng; ... every failure in scope reports "seed = N".
class TestRng {
 public:
  TestRng();
  explicit TestRng(uint64_t seed);
  uint64_t seed() const { return seed_; }
  std::mt19937_64& engine() { return engine_; }
  float normal(float stddev = 1.0f);
  int64_t uniform_int(int64_t lo, int64_t hi);  // inclusive
  std::vector<float> normal_vector(size_t n, float stddev = 1.0f);
  // A tensor of N(0, stddev) values stored in `dtype` (rounded to it).
  Tensor normal_tensor(std::vector<int64_t> shape, float stddev = 1.0f, DType dtype = DType::F32);

 private:
  uint64_t seed_;
  std::mt19937_64 engine_;
  ::testing::ScopedTrace trace_;
};

// Fills a tensor's bytes with junk (0xA5) so that unwritten outputs show up.
void fill_junk(Tensor& t);

// Largest |a - b| / max(|b|max, tiny) over all elements: a normwise relative error against reference b.
double max_rel_error(const Tensor& a, const Tensor& b);

}  // namespace moe::test
