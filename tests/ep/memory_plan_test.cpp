// moe plan's maths: DeepSeek-V3 on 8 and 16 ranks of 141 GiB, exact expert bytes, refusals, sizes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "moe/core/check.h"
#include "ep/memory_plan.h"

namespace moe::ep {
namespace {

nlohmann::json deepseek_v3() {
  std::ifstream file(std::string(MOE_TEST_DATA) + "/configs/deepseek-v3.json");
  return nlohmann::json::parse(file);
}

Plan plan(int ranks, WeightDType dtype, int64_t tokens = 4096) {
  return plan_memory(deepseek_v3(), contiguous_placement(256, ranks),
                     {.n_ranks = ranks, .device_bytes = parse_bytes("141GiB"), .max_batched_tokens = tokens,
                      .dtype = dtype});
}

TEST(MemoryPlan, DeepSeekV3ExpertBytesAreExact) {
  // 256 experts × 3·7168·2048 params × 58 MoE layers (61 layers, first 3 dense), bf16, over 8 ranks.
  const Plan p = plan(8, WeightDType::bf16);
  EXPECT_EQ(p.ranks[0].expert_bytes, int64_t{32} * 3 * 7168 * 2048 * 58 * 2);
  EXPECT_EQ(p.kv_bytes_per_token, (512 + 64) * 2 * 61);  // MLA latent + rope key, bf16, every layer
  // About 17 B non-expert parameters (671 B total minus 654 B in experts): 30-36 GiB in bf16.
  EXPECT_GT(p.ranks[0].other_bytes, int64_t{30} << 30);
  EXPECT_LT(p.ranks[0].other_bytes, int64_t{36} << 30);
}

TEST(MemoryPlan, DeepSeekV3On8And16Ranks) {
  const Plan bf16_8 = plan(8, WeightDType::bf16);
  ASSERT_EQ(bf16_8.problems.size(), 8u);  // 152 GiB of experts alone exceed 141 GiB
  EXPECT_NE(bf16_8.problems[0].find("fp8 expert weights"), std::string::npos) << bf16_8.problems[0];
  const Plan fp8_8 = plan(8, WeightDType::fp8), bf16_16 = plan(16, WeightDType::bf16);
  EXPECT_TRUE(fp8_8.problems.empty());
  EXPECT_TRUE(bf16_16.problems.empty());
  EXPECT_EQ(bf16_16.ranks.size(), 16u);
  EXPECT_GT(bf16_16.ranks[15].kv_tokens, 100000);
  EXPECT_GT(fp8_8.ranks[0].kv_tokens, 100000);
}

TEST(MemoryPlan, UnevenPlacementLoadsItsRank) {
  std::vector<std::vector<int32_t>> ranks(8);
  for (int e = 0; e < 256; ++e) ranks[e < 64 ? 0 : 1 + e % 7].push_back(e);
  const Plan p = plan_memory(deepseek_v3(), make_placement(256, 8, ranks),
                             {.n_ranks = 8, .device_bytes = parse_bytes("141GiB"), .max_batched_tokens = 128,
                              .dtype = WeightDType::fp8});
  ASSERT_EQ(p.problems.size(), 1u);
  EXPECT_NE(p.problems[0].find("rank 0 needs"), std::string::npos) << p.problems[0];
}

TEST(MemoryPlan, ParseBytes) {
  EXPECT_EQ(parse_bytes("141GiB"), int64_t{141} << 30);
  EXPECT_EQ(parse_bytes("80GB"), int64_t{80'000'000'000});
  EXPECT_EQ(parse_bytes("1.5KiB"), 1536);
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_THROW(parse_bytes("141 gigs"), Error);
  EXPECT_THROW(parse_bytes("GiB"), Error);
}

}  // namespace
}  // namespace moe::ep
