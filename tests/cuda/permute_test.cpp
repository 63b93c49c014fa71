// The CUDA permute (on a PermuteWorkspace, as the layers run it) against cpu::permute_* (exact),
// contiguous and padded, both overflow policies.
#include "cuda_test_util.h"
#include "cpu/ops.h"
#include "cuda/ops.h"
#include "cuda/permute_workspace.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

// 0xA5 bytes over n values at p: a value the permute leaves unwritten cannot pass for a right one.
template <class T>
void junk(T* p, int64_t n) {
  MOE_CUDA_CHECK(cudaMemset(p, 0xA5, std::max<int64_t>(n, 0) * sizeof(T)));
}

std::vector<int32_t> host(const int32_t* ptr, int64_t n) {
  std::vector<int32_t> out(n);
  MOE_CUDA_CHECK(cudaDeviceSynchronize());
  MOE_CUDA_CHECK(cudaMemcpy(out.data(), ptr, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return out;
}

template <class T>
std::vector<T> values(const Tensor& t) {
  return {t.data_as<T>(), t.data_as<T>() + t.numel()};
}

TEST(CudaPermute, MatchesTheCpuPermute) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  // E <= 256 with T * k < 4096 take the one-block path (8 warps below 2048 pairs, 16 from there: T 255 and
  // 256 at k 8 sit on that switch, T 511 fills every warp's slice), up to 16384 the block-per-expert path
  // (T 512 at k 8 sits on the switch, T 1000 ends mid-chunk, T 2048 fills every thread's chunks), the rest
  // (E 300 and 1024 at every T) the two launches over chunks of 2048 pairs (T 2500 at k 8: 10 chunks, the
  // last partial; T 4096: 16 whole ones).
  for (int E : {1, 3, 8, 60, 256, 300, 1024})
    for (int64_t T : {1, 7, 97, 255, 256, 511, 512, 1000, 2048, 2500, 4096})
      for (int64_t capacity : {int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{5}})
        for (bool renormalize : {false, true}) {
          const int k = std::min(E, 8);
          SCOPED_TRACE("E " + std::to_string(E) + " T " + std::to_string(T) + " capacity " + std::to_string(capacity));
          // Skewed ids: a few hot experts, distinct within a token.
          std::vector<int32_t> ids;
          for (int64_t t = 0; t < T; ++t) {
            std::vector<int32_t> row;
            while (static_cast<int>(row.size()) < k) {
              const int32_t e = static_cast<int32_t>(rng.uniform_int(0, 2) ? rng.uniform_int(0, std::min(E, 4) - 1)
                                                                              : rng.uniform_int(0, E - 1));
              if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
            }
            ids.insert(ids.end(), row.begin(), row.end());
          }
          std::vector<float> weights(T * k);
          for (auto& w : weights) w = std::fabs(rng.normal()) + 0.01f;
          TopK topk{Tensor::empty(DType::I32, {T, k}), Tensor::from_f32({T, k}, weights)};
          std::copy(ids.begin(), ids.end(), topk.ids.data_as<int32_t>());
          const Tensor x = Tensor::zeros(DType::F32, {T, 1});
          const OverflowPolicy policy = renormalize ? OverflowPolicy::renormalize : OverflowPolicy::drop;
          const ExpertBatch want = capacity < 0 ? cpu::permute_contiguous(x, topk, E)
                                                : cpu::permute_padded(x, topk, E, capacity, policy);
          const int64_t rows = want.rows.size(0);
          const PermuteWorkspace workspace(E, T * k, std::max<int64_t>(rows, 1));
          const PermuteBuffers& b = workspace.buffers();
          test::Device<int32_t> d_ids(ids);
          test::Device<float> d_weights(weights);
          // Tall and even tiles (the wgmma kernel's) on some cases: both tile-map builders (one-block, sorted).
          const int tall_rows = renormalize ? 5 : 0;
          const bool even_tiles = renormalize == (T % 2 == 1);
          const TileMap tiles = workspace.tile_map(16, std::max<int64_t>(rows, 1), tall_rows, even_tiles);
          for (int32_t* p : {b.expert_counts, b.expert_offsets, b.segment_counts, b.dropped}) junk(p, E);
          junk(b.pair_rows, T * k);
          junk(b.pair_weights, T * k);
          junk(b.row_token, rows);
          junk(tiles.tile_expert, tiles.max_tiles);
          junk(tiles.tile_row, tiles.max_tiles);
          junk(tiles.n_tiles, 1);
          permute(d_ids.get(), d_weights.get(), T, k, E, capacity, renormalize, b, tiles, nullptr);
          EXPECT_EQ(host(b.pair_rows, T * k), values<int32_t>(want.pair_rows));
          EXPECT_EQ(host(b.row_token, rows), values<int32_t>(want.row_token));
          const auto offsets = host(b.expert_offsets, E), counts = host(b.segment_counts, E);
          const auto dropped = host(b.dropped, E);
          for (int e = 0; e < E; ++e) {
            EXPECT_EQ(offsets[e], want.expert_offsets.data_as<int64_t>()[e]);
            EXPECT_EQ(counts[e], want.expert_counts.data_as<int64_t>()[e]);
            EXPECT_EQ(dropped[e], want.dropped_per_expert.data_as<int64_t>()[e]);
          }
          // The tile map covers every filled row of every segment exactly once; with tall tiles a tile takes
          // the rest of its segment when at most 16 + tall_rows rows are left, and no tile is left with fewer
          // than tall_rows + 1 rows unless it is its segment's only one; with even tiles, tiles 2i and 2i + 1
          // are one segment's, the second maybe an empty one at the segment's end.
          const auto n = host(tiles.n_tiles, 1)[0];
          int64_t want_tiles = 0;
          for (int e = 0; e < E; ++e) {
            int64_t with_rows = (counts[e] + 15) / 16;
            if (with_rows > 1 && counts[e] - (with_rows - 1) * 16 <= tall_rows) --with_rows;
            want_tiles += even_tiles && with_rows % 2 == 1 ? with_rows + 1 : with_rows;
          }
          ASSERT_LE(want_tiles, tiles.max_tiles) << "the workspace's bound";
          ASSERT_EQ(n, want_tiles);
          const auto t_expert = host(tiles.tile_expert, n), t_row = host(tiles.tile_row, n);
          int64_t covered = 0;
          if (even_tiles) {
            ASSERT_EQ(n % 2, 0);
            for (int32_t i = 0; i + 1 < n; i += 2) ASSERT_EQ(t_expert[i], t_expert[i + 1]) << "pair " << i / 2;
          }
          for (int32_t i = 0; i < n; ++i) {
            const int32_t e = t_expert[i];
            ASSERT_TRUE(e >= 0 && e < E);
            ASSERT_GE(t_row[i], offsets[e]);
            const bool empty = t_row[i] == offsets[e] + counts[e];
            if (empty) {
              ASSERT_TRUE(even_tiles && i % 2 == 1 && t_expert[i - 1] == e) << "empty tile " << i;
              continue;
            }
            ASSERT_LT(t_row[i], offsets[e] + counts[e]);
            const int64_t left = offsets[e] + counts[e] - t_row[i];
            covered += left <= 16 + tall_rows ? left : 16;
            if (t_row[i] > offsets[e]) {
              EXPECT_GT(left, tall_rows) << "tile " << i << " should have been merged";
            }
          }
          int64_t filled = 0;
          for (int e = 0; e < E; ++e) filled += counts[e];
          EXPECT_EQ(covered, filled);
          std::vector<float> got_w(T * k);
          MOE_CUDA_CHECK(cudaMemcpy(got_w.data(), b.pair_weights, T * k * sizeof(float), cudaMemcpyDeviceToHost));
          for (int64_t i = 0; i < T * k; ++i) {
            const float w = want.pair_weights.data_as<float>()[i];
            ASSERT_NEAR(got_w[i], w, 1e-6 * std::max(1.0f, std::fabs(w)));  // fp32 on the GPU, fp64 on the CPU
          }
        }
}

TEST(CudaPermute, TileMapCoversEverySegmentOnce) {
  MOE_SKIP_WITHOUT_GPU();
  const std::vector<int32_t> offsets = {0, 5, 5, 40}, counts = {5, 0, 35, 17};
  test::Device<int32_t> d_offsets(offsets), d_counts(counts), tile_expert(64), tile_row(64), n_tiles(1);
  build_tiles(d_offsets.get(), d_counts.get(), 4, 16, tile_expert.get(), tile_row.get(), n_tiles.get(), 64, nullptr);
  EXPECT_EQ(n_tiles.host()[0], 1 + 0 + 3 + 2);
  const auto experts = tile_expert.host(), rows = tile_row.host();
  EXPECT_EQ(std::vector<int32_t>(experts.begin(), experts.begin() + 6), (std::vector<int32_t>{0, 2, 2, 2, 3, 3}));
  EXPECT_EQ(std::vector<int32_t>(rows.begin(), rows.begin() + 6), (std::vector<int32_t>{0, 5, 21, 37, 40, 56}));
}

TEST(CudaPermute, TallTilesTakeShortRemainders) {
  MOE_SKIP_WITHOUT_GPU();
  // Tiles of 16 that take up to 4 more rows: 5 rows one tile; 35 two (16, then 16 + 3); 37 three (5 left is
  // more than 4); 20 one tile of 20; 21 two (16, 5).
  const std::vector<int32_t> offsets = {0, 5, 40, 77, 97}, counts = {5, 35, 37, 20, 21};
  test::Device<int32_t> d_offsets(offsets), d_counts(counts), tile_expert(64), tile_row(64), n_tiles(1);
  TileMap map{.tile_rows = 16, .tile_expert = tile_expert.get(), .tile_row = tile_row.get(), .n_tiles = n_tiles.get(),
              .max_tiles = 64, .tall_rows = 4};
  build_tiles(d_offsets.get(), d_counts.get(), 5, map, nullptr);
  ASSERT_EQ(n_tiles.host()[0], 1 + 2 + 3 + 1 + 2);
  auto experts = tile_expert.host(), rows = tile_row.host();
  EXPECT_EQ(std::vector<int32_t>(experts.begin(), experts.begin() + 9),
            (std::vector<int32_t>{0, 1, 1, 2, 2, 2, 3, 4, 4}));
  EXPECT_EQ(std::vector<int32_t>(rows.begin(), rows.begin() + 9),
            (std::vector<int32_t>{0, 5, 21, 40, 56, 72, 77, 97, 113}));
  // Even tiles: the segments of 5, 37 and 20 rows get an empty tile at their end (5, 77, 97).
  map.even_tiles = true;
  build_tiles(d_offsets.get(), d_counts.get(), 5, map, nullptr);
  ASSERT_EQ(n_tiles.host()[0], 2 + 2 + 4 + 2 + 2);
  experts = tile_expert.host();
  rows = tile_row.host();
  EXPECT_EQ(std::vector<int32_t>(experts.begin(), experts.begin() + 12),
            (std::vector<int32_t>{0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(std::vector<int32_t>(rows.begin(), rows.begin() + 12),
            (std::vector<int32_t>{0, 5, 5, 21, 40, 56, 72, 77, 77, 97, 97, 113}));
}

}  // namespace
}  // namespace moe::cuda
