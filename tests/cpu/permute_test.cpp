#include <gtest/gtest.h>

#include <vector>

#include "cpu/ops.h"
#include "test_random.h"

namespace moe::cpu {
namespace {

TopK make_topk(int64_t T, int64_t k, std::vector<int32_t> ids, std::vector<float> weights) {
  TopK topk{Tensor::empty(DType::I32, {T, k}), Tensor::from_f32({T, k}, weights)};
  std::copy(ids.begin(), ids.end(), topk.ids.data_as<int32_t>());
  return topk;
}

Tensor token_rows(int64_t T, int64_t H) {
  std::vector<float> v(T * H);
  for (int64_t i = 0; i < T * H; ++i) v[i] = static_cast<float>(i / H) + 0.01f * static_cast<float>(i % H);
  return Tensor::from_f32({T, H}, v);
}

std::vector<int64_t> as_vector(const Tensor& t) {
  return {t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel()};
}
std::vector<int32_t> as_vector32(const Tensor& t) {
  return {t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel()};
}

// 4 tokens, k = 2, 3 experts (expert 1 gets nothing).
const std::vector<int32_t> kIds = {2, 0, 0, 2, 2, 0, 0, 2};
const std::vector<float> kWeights = {0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f};

TEST(Permute, ContiguousIsStableAndExpertMajor) {
  const Tensor x = token_rows(4, 3);
  const ExpertBatch b = permute_contiguous(x, make_topk(4, 2, kIds, kWeights), 3);
  EXPECT_EQ(as_vector(b.expert_counts), (std::vector<int64_t>{4, 0, 4}));
  EXPECT_EQ(as_vector(b.expert_offsets), (std::vector<int64_t>{0, 4, 4}));
  EXPECT_EQ(as_vector32(b.row_token), (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(as_vector32(b.pair_rows), (std::vector<int32_t>{4, 0, 1, 5, 6, 2, 3, 7}));
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t h = 0; h < 3; ++h)
      EXPECT_EQ(b.rows.data_as<float>()[r * 3 + h], x.data_as<float>()[b.row_token.data_as<int32_t>()[r] * 3 + h]);
  EXPECT_EQ(b.capacity, -1);
}

TEST(Permute, PaddedDropsFirstComeInTokenOrder) {
  const Tensor x = token_rows(4, 3);
  const ExpertBatch b = permute_padded(x, make_topk(4, 2, kIds, kWeights), 3, 3, OverflowPolicy::drop);
  EXPECT_EQ(b.rows.size(0), 9);
  EXPECT_EQ(as_vector(b.expert_counts), (std::vector<int64_t>{3, 0, 3}));
  EXPECT_EQ(as_vector(b.dropped_per_expert), (std::vector<int64_t>{1, 0, 1}));
  // Token 3 is last to arrive at both experts: both its pairs dropped.
  EXPECT_EQ(as_vector32(b.pair_rows), (std::vector<int32_t>{6, 0, 1, 7, 8, 2, -1, -1}));
  EXPECT_EQ(as_vector32(b.row_token), (std::vector<int32_t>{0, 1, 2, -1, -1, -1, 0, 1, 2}));
  const float* w = b.pair_weights.data_as<float>();
  EXPECT_FLOAT_EQ(w[6], 0.0f);
  EXPECT_FLOAT_EQ(w[7], 0.0f);
  EXPECT_FLOAT_EQ(w[0], 0.6f);
  for (int64_t h = 0; h < 3; ++h) EXPECT_EQ(b.rows.data_as<float>()[3 * 3 + h], 0.0f);  // padding is zero
}

TEST(Permute, PaddedRenormalizeRestoresTheTokenWeightSum) {
  // Capacity 1: token 0 keeps both; token 1 keeps nothing at expert 0 but keeps... nothing at expert 2.
  const std::vector<int32_t> ids = {0, 1, 0, 2};
  const std::vector<float> weights = {0.75f, 0.25f, 0.2f, 0.8f};
  const ExpertBatch b =
      permute_padded(token_rows(2, 2), make_topk(2, 2, ids, weights), 3, 1, OverflowPolicy::renormalize);
  const float* w = b.pair_weights.data_as<float>();
  EXPECT_FLOAT_EQ(w[0], 0.75f);
  EXPECT_FLOAT_EQ(w[1], 0.25f);
  EXPECT_FLOAT_EQ(w[2], 0.0f);  // dropped
  EXPECT_FLOAT_EQ(w[3], 1.0f);  // 0.8 rescaled to the token's sum 1.0
  EXPECT_EQ(b.pair_rows.data_as<int32_t>()[2], -1);
}

TEST(Permute, RejectsOutOfRangeExperts) {
  EXPECT_THROW(permute_contiguous(token_rows(1, 2), make_topk(1, 1, {3}, {1.0f}), 3), Error);
}

TEST(Unpermute, WeightedSumSkipsDroppedPairs) {
  const Tensor x = token_rows(4, 3);
  const ExpertBatch b = permute_padded(x, make_topk(4, 2, kIds, kWeights), 3, 3, OverflowPolicy::drop);
  Tensor expert_out = b.rows;  // identity experts
  const Tensor out = unpermute(expert_out, b);
  for (int64_t h = 0; h < 3; ++h) {
    EXPECT_FLOAT_EQ(out.data_as<float>()[0 * 3 + h], x.data_as<float>()[0 * 3 + h]);  // weights sum to 1
    EXPECT_FLOAT_EQ(out.data_as<float>()[3 * 3 + h], 0.0f);                           // all dropped
  }
}

}  // namespace
}  // namespace moe::cpu
