// The tuned grouped-GEMM table: lookup by shape and token bucket, the committed table's form, and the
// layer's plan (the table where it has an entry, the policy elsewhere). Host logic only.
#include "cuda/grouped_gemm_plan.h"
#include "cuda/ops.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <tuple>

namespace moe::cuda {
namespace {

TEST(TunedTiles, FindsTheShapeAndTheTokenBucket) {
  const TunedTilesEntry table[] = {
      {128, 768, 2048, 4, 32, -1, -1},   // T 16..31: mma.sync, 32-row tiles
      {128, 768, 2048, 10, 128, 0, 1},   // T 1024..2047: wgmma, staged down only
      {8, 14336, 4096, 7, 64, -1, -1},
  };
  for (int64_t t : {16, 17, 31}) {
    const auto got = find_tuned_tiles(table, 128, 768, 2048, t);
    ASSERT_TRUE(got) << t;
    EXPECT_EQ(got->tile_rows, 32);
    EXPECT_EQ(got->kernel, GroupedGemmKernel::mma);
    EXPECT_FALSE(got->staged_gate_up.has_value());
    EXPECT_TRUE(got->tuned);
  }
  for (int64_t t : {1, 15, 32, 1023, 2048}) EXPECT_FALSE(find_tuned_tiles(table, 128, 768, 2048, t)) << t;
  const auto wide = find_tuned_tiles(table, 128, 768, 2048, 1500);
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->kernel, GroupedGemmKernel::wgmma);
  EXPECT_EQ(wide->staged_gate_up, false);
  EXPECT_EQ(wide->staged_down, true);
  // Another shape's entry never answers: each of E, N and K is part of the key.
  EXPECT_FALSE(find_tuned_tiles(table, 64, 768, 2048, 16));
  EXPECT_FALSE(find_tuned_tiles(table, 128, 1024, 2048, 16));
  EXPECT_FALSE(find_tuned_tiles(table, 128, 768, 4096, 16));
  EXPECT_TRUE(find_tuned_tiles(table, 8, 14336, 4096, 200));
  EXPECT_FALSE(find_tuned_tiles(table, 8, 14336, 4096, 0));
}

TEST(TunedTiles, CommittedTableIsWellFormed) {
  std::set<std::tuple<int, int, int, int>> keys;
  for (const TunedTilesEntry& e : tuned_tiles_table()) {
    SCOPED_TRACE(testing::Message() << e.n_experts << " " << e.n << " " << e.k << " 2^" << e.log2_tokens);
    EXPECT_TRUE(keys.insert({e.n_experts, e.n, e.k, e.log2_tokens}).second) << "duplicate key";
    EXPECT_TRUE(e.tile_rows == 16 || e.tile_rows == 32 || e.tile_rows == 48 || e.tile_rows == 64 ||
                e.tile_rows == 128);
    EXPECT_GE(e.log2_tokens, 0);
    EXPECT_LE(e.log2_tokens, 20);
    if (e.tile_rows == 128) {
      EXPECT_TRUE(e.staged_gate_up == 0 || e.staged_gate_up == 1);
      EXPECT_TRUE(e.staged_down == 0 || e.staged_down == 1);
    } else {
      EXPECT_EQ(e.staged_gate_up, -1);
      EXPECT_EQ(e.staged_down, -1);
    }
  }
}

// The plan follows the committed table at every entry (both ends of its bucket) where nothing in the
// environment forces a choice, and the policy where the table is silent or the batch is padded.
TEST(TunedTiles, LayerPlanTakesTheTableElseThePolicy) {
  if (std::getenv("MOE_TUNED_TILES") || std::getenv("MOE_TILE_ROWS") || std::getenv("MOE_GROUPED_GEMM"))
    GTEST_SKIP() << "a tile choice is forced in the environment";
  for (const TunedTilesEntry& e : tuned_tiles_table()) {
    if (e.tile_rows == 128 && !wgmma_grouped_gemm_available()) continue;
    for (const int64_t t : {int64_t{1} << e.log2_tokens, (int64_t{2} << e.log2_tokens) - 1}) {
      const RoutedGemmPlan plan = routed_gemm_plan(e.n_experts, 8, e.n, e.k, t, -1);
      EXPECT_EQ(plan, *find_tuned_tiles(tuned_tiles_table(), e.n_experts, e.n, e.k, t)) << t;
      // Padded batches were not tuned: the policy for their capacity.
      const RoutedGemmPlan padded = routed_gemm_plan(e.n_experts, 8, e.n, e.k, t, 40);
      EXPECT_EQ(padded.tile_rows, grouped_gemm_tile_rows(40.0));
    }
  }
  // A shape no table holds (E 3): the policy.
  const RoutedGemmPlan plan = routed_gemm_plan(3, 2, 192, 256, 96, -1);
  EXPECT_EQ(plan.tile_rows, grouped_gemm_tile_rows(96.0 * 2 / 3));
  EXPECT_EQ(plan.kernel, grouped_gemm_kernel_for(plan.tile_rows));
  EXPECT_FALSE(plan.staged_gate_up.has_value());
  EXPECT_FALSE(plan.tuned);
}

// A tuned staged epilogue replaces the policy's, for the GEMM it is given to.
TEST(TunedTiles, TunedStagedEpilogueReplacesThePolicy) {
  if (std::getenv("MOE_WGMMA_STAGED_EPILOGUE")) GTEST_SKIP() << "MOE_WGMMA_STAGED_EPILOGUE overrides both";
  // Qwen3 T=2048 (128 rows an expert): the policy stages the down GEMM (K = 768), not the gate/up (K = 2048).
  EXPECT_FALSE(wgmma_schedule_for(2048 * 8, 128, true, 2048).staged_epilogue);
  EXPECT_TRUE(wgmma_schedule_for(2048 * 8, 128, true, 2048, true).staged_epilogue);
  EXPECT_TRUE(wgmma_schedule_for(2048 * 8, 128, false, 768).staged_epilogue);
  EXPECT_FALSE(wgmma_schedule_for(2048 * 8, 128, false, 768, false).staged_epilogue);
}

}  // namespace
}  // namespace moe::cuda
