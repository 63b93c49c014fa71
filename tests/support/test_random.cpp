#include "test_random.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace moe::test {

uint64_t fresh_seed() {
  if (const char* env = std::getenv("MOE_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  static std::random_device device;
  return (uint64_t{device()} << 32) ^ device() ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

TestRng::TestRng() : TestRng(fresh_seed()) {}

TestRng::TestRng(uint64_t seed)
    : seed_(seed), engine_(seed), trace_(__FILE__, __LINE__, "seed = " + std::to_string(seed) + " (MOE_TEST_SEED)") {}

float TestRng::normal(float stddev) { return std::normal_distribution<float>(0.0f, stddev)(engine_); }

int64_t TestRng::uniform_int(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
}

std::vector<float> TestRng::normal_vector(size_t n, float stddev) {
  std::vector<float> v(n);
  for (auto& x : v) x = normal(stddev);
  return v;
}

Tensor TestRng::normal_tensor(std::vector<int64_t> shape, float stddev, DType dtype) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(stddev);
  return t.to(dtype);
}

void fill_junk(Tensor& t) { std::memset(t.data(), 0xA5, t.nbytes()); }

double max_rel_error(const Tensor& a, const Tensor& b) {
  const Tensor fa = a.to_f32(), fb = b.to_f32();
  EXPECT_EQ(fa.shape(), fb.shape());
  if (fa.shape() != fb.shape()) return INFINITY;
  const float* pa = fa.data_as<float>();
  const float* pb = fb.data_as<float>();
  double scale = 1e-30, worst = 0.0;
  for (int64_t i = 0; i < fb.numel(); ++i) scale = std::max(scale, std::fabs(double{pb[i]}));
  for (int64_t i = 0; i < fb.numel(); ++i) {
    const double diff = std::fabs(double{pa[i]} - double{pb[i]});
    if (std::isnan(diff)) return INFINITY;  // NaN never passes
    worst = std::max(worst, diff);
  }
  return worst / scale;
}

}  // namespace moe::test
