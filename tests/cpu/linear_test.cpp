// The model's linear layers on every kernel build this CPU runs (plain C++, AVX2, AVX-512), against an fp64
// reference on the same (dtype-rounded) weights: F32, BF16 and F16 weights, with and without bias, shapes
// that leave partial vectors, tiles and token panels (in, out and T not multiples of 16, 4 or 6), token
// counts over one block of 64; and the axpy kernel (a weight used transposed: MLA's absorbed kv_b_proj,
// attention's values) on strided rows. fp32 accumulation: every element within 1e-5 of Σ|x·w|.
#include "cpu/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "linear_kernels.h"
#include "test_random.h"

namespace moe::test {
namespace {

using cpu::LinearIsa;

std::vector<LinearIsa> isas() {
  __builtin_cpu_init();
  std::vector<LinearIsa> out = {LinearIsa::scalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out.push_back(LinearIsa::avx2);
  if (__builtin_cpu_supports("avx512f")) out.push_back(LinearIsa::avx512);
  return out;
}

// Checks y [T, out] against Σ_k x[t, k] · w(o, k) in fp64, each element within 1e-5 · Σ_k |x · w|.
template <class WeightAt>
void expect_close(const Tensor& y, const Tensor& x, const Tensor& bias, int64_t out, WeightAt w) {
  const int64_t T = x.size(0), in = x.size(1);
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{T, out}));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias.defined() ? bias.data_as<float>()[o] : 0.0, magnitude = std::abs(sum);
      for (int64_t k = 0; k < in; ++k) {
        const double p = double{x.data_as<float>()[t * in + k]} * w(o, k);
        sum += p;
        magnitude += std::abs(p);
      }
      ASSERT_NEAR(y.data_as<float>()[t * out + o], sum, 1e-5 * magnitude + 1e-30) << "t " << t << " o " << o;
    }
}

struct Shape {
  int64_t T, in, out;
};
const Shape kShapes[] = {{1, 37, 13}, {1, 256, 67}, {5, 64, 33}, {7, 130, 70},
                         {13, 16, 9}, {70, 48, 21}, {131, 80, 5}};

TEST(CpuLinear, LinearMatchesFp64OnEveryKernelBuildAndDtype) {
  TestRng rng;
  for (LinearIsa isa : isas())
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (const Shape& s : kShapes)
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "isa " << int(isa) << " dtype " << dtype_name(dtype) << " T " << s.T << " in "
                       << s.in << " out " << s.out << " bias " << with_bias);
          const Tensor x = rng.normal_tensor({s.T, s.in});
          const Tensor w = rng.normal_tensor({s.out, s.in}, 0.5f, dtype);
          const Tensor bias = with_bias ? rng.normal_tensor({s.out}) : Tensor{};
          const Tensor wf = w.to_f32();
          const Tensor y = cpu::linear(x, w, bias, isa);
          expect_close(y, x, bias, s.out,
                       [&](int64_t o, int64_t k) { return double{wf.data_as<float>()[o * s.in + k]}; });
        }
}

TEST(CpuLinear, AxpyKernelMatchesFp64OnStridedRows) {
  TestRng rng;
  for (LinearIsa isa : isas())
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (const Shape& s : kShapes) {
        SCOPED_TRACE(::testing::Message() << "isa " << int(isa) << " dtype " << dtype_name(dtype) << " T " << s.T
                                          << " in " << s.in << " out " << s.out);
        const Tensor x = rng.normal_tensor({s.T, s.in});
        // Rows of out + 3 elements of which columns [1, 1 + out) are used, as MLA's per-head narrows of
        // kv_b_proj and the cache's KV heads are.
        const Tensor full = rng.normal_tensor({s.in, s.out + 3}, 0.5f, dtype);
        const Tensor wf = full.to_f32();
        Tensor y = Tensor::empty(DType::F32, {s.T, s.out});
        std::vector<const float*> a(s.T);
        std::vector<float*> rows(s.T);
        for (int64_t t = 0; t < s.T; ++t) a[t] = x.data_as<float>() + t * s.in, rows[t] = y.data_as<float>() + t * s.out;
        const auto* base = static_cast<const char*>(full.data()) + dtype_size(dtype);
        cpu::axpy_rows(isa,
                         {.a = a.data(), .n = s.T, .j = s.in, .w = base, .w_dtype = dtype, .w_stride = s.out + 3,
                          .y = rows.data()},
                         0, s.out);
        expect_close(y, x, Tensor{}, s.out,
                     [&](int64_t o, int64_t k) { return double{wf.data_as<float>()[k * (s.out + 3) + 1 + o]}; });
      }
}

}  // namespace
}  // namespace moe::test
