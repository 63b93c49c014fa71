#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/ops.h"
#include "test_random.h"

namespace moe::cpu {
namespace {

// y = down · (silu(gate · x) ⊙ (up · x)) written out in doubles.
std::vector<double> mlp_f64(const float* x, const SwigluWeights& w) {
  const Tensor g = w.gate.to_f32(), u = w.up.to_f32(), d = w.down.to_f32();
  const int64_t I = g.size(0), H = g.size(1);
  std::vector<double> act(I), y(H, 0.0);
  for (int64_t i = 0; i < I; ++i) {
    double a = 0, b = 0;
    for (int64_t h = 0; h < H; ++h) {
      a += double{g.data_as<float>()[i * H + h]} * x[h];
      b += double{u.data_as<float>()[i * H + h]} * x[h];
    }
    act[i] = a / (1 + std::exp(-a)) * b;
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < I; ++i) y[h] += double{d.data_as<float>()[h * I + i]} * act[i];
  return y;
}

SwigluWeights random_mlp(test::TestRng& rng, int64_t H, int64_t I, DType dtype) {
  return {rng.normal_tensor({I, H}, 0.3f, dtype), rng.normal_tensor({I, H}, 0.3f, dtype),
          rng.normal_tensor({H, I}, 0.3f, dtype)};
}

TEST(SwigluMlp, MatchesFloat64ForEveryWeightDtype) {
  test::TestRng rng;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    const int64_t n = 5, H = 37, I = 19;
    const SwigluWeights w = random_mlp(rng, H, I, dtype);
    const Tensor x = rng.normal_tensor({n, H});
    const Tensor y = swiglu_mlp(x, w);
    for (int64_t r = 0; r < n; ++r) {
      const auto want = mlp_f64(x.data_as<float>() + r * H, w);
      for (int64_t h = 0; h < H; ++h) ASSERT_NEAR(y.data_as<float>()[r * H + h], want[h], 1e-5 * (1 + std::fabs(want[h])));
    }
  }
}

TEST(GroupedSwiglu, EachSegmentUsesItsExpertAndPaddingStaysZero) {
  test::TestRng rng;
  const int64_t T = 7, H = 16, I = 8, E = 5;
  std::vector<SwigluWeights> experts;
  for (int e = 0; e < E; ++e) experts.push_back(random_mlp(rng, H, I, DType::BF16));
  const Tensor x = rng.normal_tensor({T, H});
  TopK topk{Tensor::empty(DType::I32, {T, 2}), Tensor::from_f32({T, 2}, std::vector<float>(T * 2, 0.5f))};
  for (int64_t t = 0; t < T; ++t) {  // expert 4 gets nothing, expert 0 gets every token
    topk.ids.data_as<int32_t>()[t * 2] = 0;
    topk.ids.data_as<int32_t>()[t * 2 + 1] = 1 + static_cast<int32_t>(t % 3);
  }
  for (const ExpertBatch& b : {permute_contiguous(x, topk, E), permute_padded(x, topk, E, 4, OverflowPolicy::drop)}) {
    const Tensor out = grouped_swiglu(b, experts, 0);
    for (int64_t r = 0; r < b.rows.size(0); ++r) {
      const int32_t token = b.row_token.data_as<int32_t>()[r];
      if (token < 0) {
        for (int64_t h = 0; h < H; ++h) ASSERT_EQ(out.data_as<float>()[r * H + h], 0.0f);
        continue;
      }
      int expert = -1;  // the expert whose segment holds row r
      for (int e = 0; e < E; ++e) {
        const int64_t off = b.expert_offsets.data_as<int64_t>()[e], cnt = b.expert_counts.data_as<int64_t>()[e];
        if (r >= off && r < off + cnt) expert = e;
      }
      ASSERT_GE(expert, 0);
      const auto want = mlp_f64(x.data_as<float>() + token * H, experts[expert]);
      for (int64_t h = 0; h < H; ++h) ASSERT_NEAR(out.data_as<float>()[r * H + h], want[h], 1e-5 * (1 + std::fabs(want[h])));
    }
  }
}

TEST(GroupedSwiglu, RejectsMismatchedWeights) {
  test::TestRng rng;
  const Tensor x = rng.normal_tensor({2, 8});
  TopK topk{Tensor::zeros(DType::I32, {2, 1}), Tensor::from_f32({2, 1}, std::vector<float>{1, 1})};
  const ExpertBatch b = permute_contiguous(x, topk, 1);
  const std::vector<SwigluWeights> wrong = {random_mlp(rng, 9, 4, DType::F32)};
  EXPECT_THROW(grouped_swiglu(b, wrong, 0), Error);
}

}  // namespace
}  // namespace moe::cpu
