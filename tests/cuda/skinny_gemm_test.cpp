// skinny_gemm (the decoder's GEMV for 1-8 rows) and DenseGemm's dispatch to it, against an fp64 host product
// of the same bf16 values: every row count, widths that leave a partial unrolled stretch, output counts that
// take each split of a column over warps (1, 2, 4, 8) and leave a partial block, bf16 and fp32 outputs.
// fp32 sums of bf16 products: the bound is 1e-5 relative to the row's sum of |products| (fp32 output), plus
// one bf16 rounding (bf16 output). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/linear.h"
#include "cuda/skinny_gemm.h"
#include "cuda_test_util.h"

namespace moe::test {
namespace {

uint16_t to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

float from_bf16(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

struct Case {
  int64_t rows, in, out;
};

void check(const Case& c, bool y_f32, bool through_dense_gemm, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(c.rows * c.in), w(c.out * c.in);
  for (auto& v : x) v = to_bf16(normal(rng));
  for (auto& v : w) v = to_bf16(0.05f * normal(rng));
  Device<uint16_t> dx(x), dw(w);
  Device<float> dy32(y_f32 ? c.rows * c.out : 1);
  Device<uint16_t> dy16(y_f32 ? 1 : c.rows * c.out);
  void* y = y_f32 ? static_cast<void*>(dy32.get()) : static_cast<void*>(dy16.get());
  const auto* bx = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  const auto* bw = reinterpret_cast<const __nv_bfloat16*>(dw.get());
  if (through_dense_gemm) {
    cuda::DenseGemm gemm;
    gemm.linear(bx, c.rows, c.in, bw, c.out, y, y_f32, nullptr);
  } else {
    cuda::skinny_gemm(bx, c.rows, c.in, bw, c.out, y, y_f32, nullptr);
  }
  const std::vector<float> got32 = y_f32 ? dy32.host() : std::vector<float>{};
  const std::vector<uint16_t> got16 = y_f32 ? std::vector<uint16_t>{} : dy16.host();
  int bad = 0;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t o = 0; o < c.out; ++o) {
      double want = 0, magnitude = 0;
      for (int64_t i = 0; i < c.in; ++i) {
        const double p = double(from_bf16(x[r * c.in + i])) * from_bf16(w[o * c.in + i]);
        want += p;
        magnitude += std::abs(p);
      }
      const double got = y_f32 ? got32[r * c.out + o] : from_bf16(got16[r * c.out + o]);
      const double bound = 1e-5 * magnitude + (y_f32 ? 0.0 : std::abs(want) * 0x1p-8);
      if (std::abs(got - want) > bound && ++bad <= 5)
        ADD_FAILURE() << "rows " << c.rows << " in " << c.in << " out " << c.out << (y_f32 ? " fp32" : " bf16")
                      << ": y[" << r << ", " << o << "] = " << got << ", want " << want << " (seed " << seed << ")";
    }
}

TEST(SkinnyGemm, EveryRowCountAgainstTheHostProduct) {
  MOE_SKIP_WITHOUT_GPU();
  uint32_t seed = std::random_device{}();
  for (int64_t rows = 1; rows <= cuda::kSkinnyGemmMaxRows; ++rows)
    for (const Case& c : {Case{rows, 2048, 512}, Case{rows, 4096 + 8, 2048 + 3}, Case{rows, 8, 5},
                          Case{rows, 1024 + 264, 4101}, Case{rows, 768, 129}})
      for (bool y_f32 : {false, true}) check(c, y_f32, false, seed++);
}

TEST(SkinnyGemm, DenseGemmTakesItAtFewRowsAndCublasPastThem) {
  MOE_SKIP_WITHOUT_GPU();
  uint32_t seed = std::random_device{}();
  for (const Case& c : {Case{1, 2048, 151}, Case{8, 512, 1000}, Case{9, 512, 1000}, Case{3, 100, 64}})
    for (bool y_f32 : {false, true}) check(c, y_f32, true, seed++);
}

TEST(SkinnyGemm, RefusesShapesItDoesNotTake) {
  EXPECT_FALSE(cuda::skinny_gemm_takes(0, 64));
  EXPECT_FALSE(cuda::skinny_gemm_takes(9, 64));
  EXPECT_FALSE(cuda::skinny_gemm_takes(1, 100));
  EXPECT_TRUE(cuda::skinny_gemm_takes(8, 4096));
}

}  // namespace
}  // namespace moe::test
