// The Hopper wgmma grouped GEMMs (gather, gate+up with SwiGLU, then down) against cpu::grouped_swiglu on
// the same bf16 data: uneven experts (empty ones, one of a single row, segments that end mid-tile), sizes
// that are not multiples of the tiles (masked columns, K zero-filled past its end), outputs pre-filled with
// junk, and a case with more work units than SMs and more k-blocks than pipeline stages, so that blocks
// walk several tiles and the stages wrap around. Every case runs under several WgmmaSchedules (half tiles
// on and off; raster groups of 8 and of 3 row tiles; L2 hints; units claimed from the queue or strided,
// the queue zeroed again after each launch; clusters on pairs of row tiles, shared weight tiles, pairs that
// straddle experts, a lone last tile; clusters on pairs of column tiles that share the A tile, a lone last
// column tile; the staged epilogue with and without pairs), each with and without
// tall tiles (an expert's last tile taking up to 32 more rows), and cases are built for the edges of half
// tiles (segments whose last tile holds 1, 63, 64, 65 or 127 rows, large experts next to small ones) and of
// tall tiles (129, 160, 161, 256 + 24 rows). The unstaged epilogue stores a 32-byte sector a quad where N is
// a multiple of 16 (N = 64, 128, 192, 256, 512, 1536 here, with masked rows and columns) and 4 bytes a lane
// elsewhere (N = 136, 200, 520).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "cuda_test_util.h"
#include "core/float_convert.h"
#include "cpu/ops.h"
#include "cuda/ops.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

using test::bf16_bits;

constexpr int kTallRows = 32;  // the kernel's (wgmma_tall_rows() unless MOE_WGMMA_TALL=off)

struct Case {
  int64_t H, I;
  std::vector<int> counts;  // rows of each expert
};

// One schedule on the gathered rows: gate/up with SwiGLU, then down, against the CPU result `want`; the
// work-unit queue `scheduler` is shared by every schedule of a case (each launch must leave it zeroed).
void check_schedule(const Case& c, WgmmaSchedule schedule, int tall_rows, bool even_tiles,
                    const test::Device<uint16_t>& d_gathered,
                    const test::Device<uint16_t>& d_w13, const test::Device<uint16_t>& d_w2,
                    const test::Device<int32_t>& d_offsets, const test::Device<int32_t>& d_counts,
                    const test::Device<int32_t>& scheduler, const Tensor& want) {
  const int E = static_cast<int>(c.counts.size());
  const int64_t rows = std::accumulate(c.counts.begin(), c.counts.end(), int64_t{0}), H = c.H, I = c.I;
  // Junk in the outputs: a unit that the schedule skips leaves junk rows behind.
  test::Device<uint16_t> d_act(rows * I), d_out(rows * H);
  const int64_t max_tiles = rows / 128 + 2 * E;
  test::Device<int32_t> tile_expert(max_tiles), tile_row(max_tiles), n_tiles(1);
  build_tiles(d_offsets.get(), d_counts.get(), E,
              TileMap{.tile_rows = 128, .tile_expert = tile_expert.get(), .tile_row = tile_row.get(),
                      .n_tiles = n_tiles.get(), .max_tiles = max_tiles, .tall_rows = tall_rows,
                      .even_tiles = even_tiles},
              nullptr);
  GroupedGemmArgs up{.a = reinterpret_cast<const bf16*>(d_gathered.get()), .gather = nullptr,
                     .b = reinterpret_cast<const bf16*>(d_w13.get()), .c = reinterpret_cast<bf16*>(d_act.get()),
                     .segment_offsets = d_offsets.get(), .segment_counts = d_counts.get(),
                     .tile_expert = tile_expert.get(), .tile_row = tile_row.get(), .n_tiles = n_tiles.get(),
                     .max_tiles = max_tiles, .k = H, .n = I, .n_experts = E, .a_rows = rows,
                     .scheduler = scheduler.get(), .tall_rows = tall_rows};
  wgmma_grouped_gemm_swiglu(up, nullptr, schedule);
  MOE_CUDA_CHECK(cudaGetLastError());
  GroupedGemmArgs down = up;
  down.a = reinterpret_cast<const bf16*>(d_act.get());
  down.b = reinterpret_cast<const bf16*>(d_w2.get());
  down.c = reinterpret_cast<bf16*>(d_out.get());
  down.k = I;
  down.n = H;
  wgmma_grouped_gemm(down, nullptr, schedule);
  MOE_CUDA_CHECK(cudaGetLastError());
  const auto got = d_out.host();
  const auto queue = scheduler.host();  // the next launch claims from zero again
  EXPECT_EQ(queue[0], 0) << "next unclaimed unit";
  EXPECT_EQ(queue[1], 0) << "blocks done";
  // Normwise and per-row: a row of junk (an unwritten row) must not hide in the norm.
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double row_err2 = 0, row_ref2 = 0;
    for (int64_t j = 0; j < H; ++j) {
      const double g = ::moe::bf16_to_f32(got[r * H + j]), w = want.data_as<float>()[r * H + j];
      ASSERT_FALSE(std::isnan(g)) << "row " << r << " column " << j;
      row_err2 += (g - w) * (g - w);
      row_ref2 += w * w;
    }
    ASSERT_LE(std::sqrt(row_err2 / std::max(row_ref2, 1e-30)), 2e-2) << "row " << r;
    err2 += row_err2;
    ref2 += row_ref2;
  }
  EXPECT_LE(std::sqrt(err2 / ref2), 1e-2);
}

void check_case(const Case& c, test::TestRng& rng) {
  const int E = static_cast<int>(c.counts.size());
  const int64_t T = std::accumulate(c.counts.begin(), c.counts.end(), int64_t{0}), H = c.H, I = c.I;
  const auto [experts, w13, w2] = test::random_experts(E, H, I, rng);
  const Tensor x = rng.normal_tensor({T, H}, 1.0f, DType::BF16).to_f32();  // bf16-exact values
  // k = 1; tokens shuffled over the experts so that the gather is not the identity.
  std::vector<int32_t> expert_of;
  for (int e = 0; e < E; ++e) expert_of.insert(expert_of.end(), c.counts[e], e);
  std::shuffle(expert_of.begin(), expert_of.end(), rng.engine());
  TopK topk{Tensor::empty(DType::I32, {T, 1}), Tensor::from_f32({T, 1}, std::vector<float>(T, 1.0f))};
  std::copy(expert_of.begin(), expert_of.end(), topk.ids.data_as<int32_t>());
  const ExpertBatch batch = cpu::permute_contiguous(x, topk, E);
  const Tensor want = cpu::grouped_swiglu(batch, experts, 0);  // [T, H]

  const int64_t rows = T;
  std::vector<int32_t> offsets(E), counts(E);
  for (int e = 0; e < E; ++e) {
    offsets[e] = static_cast<int32_t>(batch.expert_offsets.data_as<int64_t>()[e]);
    counts[e] = static_cast<int32_t>(batch.expert_counts.data_as<int64_t>()[e]);
    ASSERT_EQ(counts[e], c.counts[e]);
  }
  const std::vector<int32_t> row_token(batch.row_token.data_as<int32_t>(), batch.row_token.data_as<int32_t>() + rows);
  test::Device<uint16_t> d_x(bf16_bits(x)), d_w13(w13), d_w2(w2), d_gathered(rows * H);
  test::Device<int32_t> d_offsets(offsets), d_counts(counts), d_token(row_token);
  gather_rows(reinterpret_cast<const bf16*>(d_x.get()), d_token.get(), rows, H,
              reinterpret_cast<bf16*>(d_gathered.get()), nullptr);
  using L2Hint = WgmmaSchedule::L2Hint;
  const auto hint_name = [](L2Hint h) { return h == L2Hint::normal ? "normal" : h == L2Hint::evict_last ? "last" : "first"; };
  // Every L2 hint on both operands among the schedules (the hints move no bytes, only their eviction order),
  // and both ways of walking the units, one after the other on the same work-unit queue.
  const test::Device<int32_t> scheduler(std::vector<int32_t>(wgmma_scheduler_ints(), 0));
  for (const WgmmaSchedule schedule :
       {WgmmaSchedule{.half_tiles = true,
       .raster_rows = 8,
       .a_hint = L2Hint::evict_last,
       .b_hint = L2Hint::evict_first,
       .claimed_units = true},
        WgmmaSchedule{.half_tiles = false, .raster_rows = 8},
        WgmmaSchedule{.half_tiles = true, .raster_rows = 3, .staged_epilogue = true},
        WgmmaSchedule{.half_tiles = false,
        .raster_rows = 3,
        .a_hint = L2Hint::evict_first,
        .b_hint = L2Hint::evict_last,
        .claimed_units = true},
        WgmmaSchedule{.half_tiles = true,
        .raster_rows = 8,
        .a_hint = L2Hint::evict_last,
        .claimed_units = true,
        .pairs = true},
        WgmmaSchedule{.half_tiles = false, .raster_rows = 3, .pairs = true, .staged_epilogue = true},
        WgmmaSchedule{.half_tiles = false,
        .raster_rows = 8,
        .a_hint = L2Hint::evict_last,
        .claimed_units = true,
        .column_pairs = true},
        WgmmaSchedule{.half_tiles = true, .raster_rows = 3, .column_pairs = true, .staged_epilogue = true}}) {
    // Tile maps with and without tall tiles, and with even tiles (empty tiles that keep pairs in one
    // expert: the layer's maps where pairs are on, here under every schedule).
    for (const int tall_rows : {0, kTallRows})
      for (const bool even_tiles : {false, true}) {
        SCOPED_TRACE("schedule: half tiles " + std::string(schedule.half_tiles ? "on" : "off") +
                     ", raster rows " + std::to_string(schedule.raster_rows) + ", L2 hints " +
                     hint_name(schedule.a_hint) + "/" + hint_name(schedule.b_hint) + ", units " +
                     (schedule.claimed_units ? "claimed" : "strided") + (schedule.pairs ? ", pairs" : "") +
                     (schedule.column_pairs ? ", column pairs" : "") +
                     (schedule.staged_epilogue ? ", staged epilogue" : "") + ", tall rows " +
                     std::to_string(tall_rows) + (even_tiles ? ", even tiles" : ""));
        check_schedule(c, schedule, tall_rows, even_tiles, d_gathered, d_w13, d_w2, d_offsets, d_counts, scheduler,
                       want);
      }
  }
}

TEST(CudaWgmmaGroupedGemm, MatchesTheCpuExpertsOnUnevenExperts) {
  MOE_SKIP_WITHOUT_GPU();
  if (!wgmma_grouped_gemm_available()) GTEST_SKIP() << "no sm_90a build or not a compute capability 9.0 GPU";
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  // Empty experts, a one-row expert, segments ending mid-tile and on a tile edge; H and I not multiples of
  // the tiles (K = 200 ends mid k-block; N = 136 and 200 leave masked columns).
  check_case({.H = 200, .I = 136, .counts = {0, 1, 300, 0, 129, 57, 128}}, rng);
  // 168 gate/up work units over at most 132 blocks; 8 and 24 k-blocks through 4 stages.
  check_case({.H = 512, .I = 1536, .counts = {600, 0, 1, 900}}, rng);
  // One and two k-blocks a unit: up to four units in a block's mailbox ring at once (and half tiles).
  check_case({.H = 64, .I = 128, .counts = {40, 300, 1, 64, 700, 20}}, rng);
}

TEST(CudaWgmmaGroupedGemm, PairsOfRowTilesShareWeightsOrNot) {
  MOE_SKIP_WITHOUT_GPU();
  if (!wgmma_grouped_gemm_available()) GTEST_SKIP() << "no sm_90a build or not a compute capability 9.0 GPU";
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  check_case({.H = 128, .I = 200, .counts = {300}}, rng);          // 3 tiles: a shared pair and a lone tile
  check_case({.H = 192, .I = 256, .counts = {256, 256}}, rng);     // every pair one expert's
  check_case({.H = 128, .I = 136, .counts = {100, 300, 5}}, rng);  // pairs that straddle two experts
  check_case({.H = 128, .I = 136, .counts = {280, 280}}, rng);     // tall: pairs of a full and a tall tile
}

TEST(CudaWgmmaGroupedGemm, TallTilesRunTheirExtraRows) {
  MOE_SKIP_WITHOUT_GPU();
  if (!wgmma_grouped_gemm_available()) GTEST_SKIP() << "no sm_90a build or not a compute capability 9.0 GPU";
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  // Tall tiles of 129 (one extra row), 160 (all 32) and 152 (256 + 24) rows; 161 and 300 stay two and three
  // tiles. K = 200 ends mid k-block; N = 136 (SwiGLU) and 200 (down) mask columns in the extra rows'
  // output, whose columns are the weight rows of the swapped GEMM.
  check_case({.H = 200, .I = 136, .counts = {129, 160, 161, 280, 0, 32, 300}}, rng);
  // The extra rows through a plain GEMM whose two weight slices a warpgroup holds both fall inside N.
  check_case({.H = 256, .I = 256, .counts = {150, 3, 286}}, rng);
}

TEST(CudaWgmmaGroupedGemm, SchedulesAgreeOnHalfTiles) {
  MOE_SKIP_WITHOUT_GPU();
  if (!wgmma_grouped_gemm_available()) GTEST_SKIP() << "no sm_90a build or not a compute capability 9.0 GPU";
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  // Last tiles of 64, 65, 1, 127, 63 (128 + 63), 76 (1024 + 76), 1 (256 + 1) and 52 (2048 + 52) rows;
  // 36 tiles times 5 gate/up column tiles = 180 units over <= 132 blocks.
  check_case({.H = 256, .I = 520, .counts = {64, 65, 1, 127, 0, 191, 1100, 257, 2100, 3}}, rng);
}

TEST(CudaWgmmaGroupedGemm, SchedulePolicyIsTheMeasuredOne) {
  for (const char* var : {"MOE_WGMMA_HALF_TILES", "MOE_WGMMA_L2", "MOE_WGMMA_CLAIM", "MOE_WGMMA_PAIRS",
                          "MOE_WGMMA_RASTER_ROWS", "MOE_WGMMA_STAGED_EPILOGUE", "MOE_WGMMA_COLUMN_PAIRS"})
    if (std::getenv(var) != nullptr) GTEST_SKIP() << var << " overrides the policy";
  EXPECT_TRUE(wgmma_schedule_for(1024 * 8, 256, true, 7168).half_tiles);    // DeepSeek-V3 T=1024: 32 rows per expert
  EXPECT_FALSE(wgmma_schedule_for(8192 * 8, 256, true, 7168).half_tiles);   // DeepSeek-V3 T=8192: 256
  EXPECT_TRUE(wgmma_schedule_for(1024 * 8, 128, true, 2048).half_tiles);    // Qwen3 T=1024: 64, half of the tiles full
  EXPECT_FALSE(wgmma_schedule_for(1024 * 8 + 8, 128, true, 2048).half_tiles);
  EXPECT_FALSE(wgmma_schedule_for(1024 * 2, 8, true, 4096).half_tiles);     // Mixtral T=1024: 256
  EXPECT_EQ(wgmma_schedule_for(8192 * 8, 256, true, 7168).a_hint, WgmmaSchedule::L2Hint::evict_last);
  EXPECT_TRUE(wgmma_schedule_for(8192 * 8, 256, true, 7168).claimed_units);
  EXPECT_TRUE(wgmma_schedule_for(8192 * 8, 256, true, 7168).pairs);    // 256 rows per expert: clusters share weights
  EXPECT_TRUE(wgmma_schedule_for(8192 * 2, 8, true, 4096).pairs);      // Mixtral T=8192: 2048
  EXPECT_FALSE(wgmma_schedule_for(1024 * 8, 256, true, 7168).pairs);   // DeepSeek-V3 T=1024: 32
  EXPECT_FALSE(wgmma_schedule_for(1024 * 8, 128, true, 2048).pairs);   // Qwen3 T=1024: 64
  // Column pairs in gate/up GEMMs of long K, from 65 rows an expert to the pairs of row tiles.
  EXPECT_TRUE(wgmma_schedule_for(4096 * 8, 256, true, 7168).column_pairs);    // DeepSeek-V3 T=4096: 128
  EXPECT_TRUE(wgmma_schedule_for(3072 * 8, 256, true, 7168).column_pairs);    // DeepSeek-V3 T=3072: 96
  EXPECT_FALSE(wgmma_schedule_for(4096 * 8, 256, false, 2048).column_pairs);  // not in the down GEMM
  EXPECT_FALSE(
      wgmma_schedule_for(2048 * 8, 256, true, 7168).column_pairs);  // DeepSeek-V3 T=2048: 64, half tiles
  EXPECT_FALSE(wgmma_schedule_for(8192 * 8, 256, true, 7168).column_pairs);  // DeepSeek-V3 T=8192: pairs
  EXPECT_FALSE(wgmma_schedule_for(2048 * 8, 128, true, 2048).column_pairs);  // Qwen3 T=2048: K 2048
  EXPECT_FALSE(wgmma_schedule_for(512 * 2, 8, true, 4096).column_pairs);     // Mixtral T=512: K 4096
  // The staged epilogue at short k-loops (Qwen3's down GEMM) at every T, and with half tiles at long ones.
  EXPECT_TRUE(wgmma_schedule_for(8192 * 8, 128, false, 768).staged_epilogue);
  EXPECT_TRUE(wgmma_schedule_for(1024 * 8, 128, false, 768).staged_epilogue);
  EXPECT_FALSE(wgmma_schedule_for(8192 * 8, 128, true, 2048).staged_epilogue);
  EXPECT_FALSE(wgmma_schedule_for(8192 * 8, 256, false, 2048).staged_epilogue);
  EXPECT_FALSE(wgmma_schedule_for(1024 * 2, 8, true, 4096).staged_epilogue);     // Mixtral T=1024: 256 rows
  EXPECT_FALSE(wgmma_schedule_for(512 * 2, 8, false, 14336).staged_epilogue);    // Mixtral T=512: 128 rows
  EXPECT_TRUE(wgmma_schedule_for(128 * 2, 8, true, 4096).staged_epilogue);       // Mixtral T=128: 32 rows
  EXPECT_TRUE(wgmma_schedule_for(128 * 2, 8, false, 14336).staged_epilogue);
  EXPECT_TRUE(wgmma_schedule_for(1024 * 8, 256, true, 7168).staged_epilogue);    // DeepSeek-V3 T=1024
  EXPECT_FALSE(wgmma_schedule_for(1024 * 8, 256, false, 2048).staged_epilogue);
  EXPECT_FALSE(wgmma_schedule_for(1024 * 8, 128, true, 2048).staged_epilogue);    // Qwen3 T=1024 gate/up
  // Raster groups with pairs: an expert's pairs for gate/up, at least 4 for down; 8 without pairs.
  EXPECT_EQ(wgmma_schedule_for(8192 * 8, 256, true, 7168).raster_rows, 1);   // DeepSeek-V3 T=8192
  EXPECT_EQ(wgmma_schedule_for(8192 * 8, 256, false, 2048).raster_rows, 4);
  EXPECT_EQ(wgmma_schedule_for(8192 * 8, 128, true, 2048).raster_rows, 2);   // Qwen3 T=8192: 512 rows per expert
  EXPECT_EQ(wgmma_schedule_for(8192 * 2, 8, true, 4096).raster_rows, 8);     // Mixtral T=8192: 2048
  EXPECT_EQ(wgmma_schedule_for(8192 * 2, 8, false, 14336).raster_rows, 8);
  EXPECT_EQ(wgmma_schedule_for(1024 * 8, 256, true, 7168).raster_rows, 8);   // DeepSeek-V3 T=1024: no pairs
  if (std::getenv("MOE_WGMMA_TALL") == nullptr) {
    EXPECT_EQ(wgmma_tall_rows(), kTallRows);
  }
  // wgmma from 64-row tiles (17 rows an expert; the 48-row mma.sync tiles lose there with skewed routing); the
  // 32-row mma.sync tiles at 9-16 rows an expert, at any expert count.
  if (std::getenv("MOE_TILE_ROWS") == nullptr) {
    EXPECT_EQ(grouped_gemm_tile_rows(16.0), 32);   // DeepSeek-V3 T=512, Qwen3 T=256, Mixtral T=64
    EXPECT_EQ(grouped_gemm_tile_rows(17.0), 64);
    EXPECT_EQ(grouped_gemm_tile_rows(32.0), 64);   // DeepSeek-V3 T=1024, Qwen3 T=512, Mixtral T=128
  }
  if (wgmma_grouped_gemm_available() && std::getenv("MOE_GROUPED_GEMM") == nullptr) {
    EXPECT_EQ(grouped_gemm_kernel_for(48), GroupedGemmKernel::mma);
    EXPECT_EQ(grouped_gemm_kernel_for(32), GroupedGemmKernel::mma);
    EXPECT_EQ(grouped_gemm_kernel_for(16), GroupedGemmKernel::mma);     // decode-sized batches
    EXPECT_EQ(grouped_gemm_kernel_for(64), GroupedGemmKernel::wgmma);
    EXPECT_EQ(grouped_gemm_kernel_for(128), GroupedGemmKernel::wgmma);
  }
}

TEST(CudaWgmmaGroupedGemm, GatherRowsCopiesTokenRowsAndZeroesUnusedOnes) {
  MOE_SKIP_WITHOUT_GPU();
  // Rows narrower than a warp's 32 chunks, wider than its 256 chunks in flight (8,200 columns: 1,025 chunks,
  // one past four passes), and more rows than the grid has warps (each warp then takes several).
  struct Case {
    int64_t T, H, rows;
  };
  for (const Case c : {Case{37, 264, 50}, Case{5, 8200, 40}, Case{300, 64, 20000}}) {
    test::TestRng rng;
    std::vector<uint16_t> x(c.T * c.H);
    for (auto& v : x) v = static_cast<uint16_t>(rng.uniform_int(0, 65535));
    std::vector<int32_t> token(c.rows);
    for (auto& t : token) t = static_cast<int32_t>(rng.uniform_int(-1, c.T - 1));
    test::Device<uint16_t> d_x(x), d_out(c.rows * c.H);
    test::Device<int32_t> d_token(token);
    gather_rows(reinterpret_cast<const bf16*>(d_x.get()), d_token.get(), c.rows, c.H,
                reinterpret_cast<bf16*>(d_out.get()), nullptr);
    const auto got = d_out.host();
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.H; ++j)
        ASSERT_EQ(got[r * c.H + j], token[r] < 0 ? 0 : x[token[r] * c.H + j])
            << "H " << c.H << " row " << r << " column " << j;
  }
}

TEST(CudaWgmmaGroupedGemm, GatherPairRowsCopiesEachPairsRowAndLeavesOthers) {
  MOE_SKIP_WITHOUT_GPU();
  // k = 1, 8 and 32; rows narrower than a warp's 32 chunks and wider than its 256 in flight (8,200 columns:
  // 1,025 chunks, one past four passes); more pairs than the grid has warps; dropped pairs (-1) and rows of
  // no pair, which keep what they held.
  struct Case {
    int64_t T, H;
    int k;
  };
  for (const Case c : {Case{37, 264, 8}, Case{5, 8200, 32}, Case{20000, 64, 1}, Case{3000, 136, 8}}) {
    test::TestRng rng;
    const int64_t pairs = c.T * c.k, rows = pairs + 7;
    std::vector<uint16_t> x(c.T * c.H), junk(rows * c.H);
    for (auto& v : x) v = static_cast<uint16_t>(rng.uniform_int(0, 65535));
    for (auto& v : junk) v = static_cast<uint16_t>(rng.uniform_int(0, 65535));
    std::vector<int32_t> pair_rows(rows);
    std::iota(pair_rows.begin(), pair_rows.end(), 0);
    std::shuffle(pair_rows.begin(), pair_rows.end(), rng.engine());
    pair_rows.resize(pairs);
    for (int64_t p = 0; p < pairs; p += 11) pair_rows[p] = -1;
    std::vector<int64_t> token_of_row(rows, -1);
    for (int64_t p = 0; p < pairs; ++p)
      if (pair_rows[p] >= 0) token_of_row[pair_rows[p]] = p / c.k;
    test::Device<uint16_t> d_x(x), d_out(junk);
    test::Device<int32_t> d_pair_rows(pair_rows);
    gather_pair_rows(reinterpret_cast<const bf16*>(d_x.get()), d_pair_rows.get(), c.T, c.k, c.H,
                     reinterpret_cast<bf16*>(d_out.get()), nullptr);
    const auto got = d_out.host();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c.H; ++j)
        ASSERT_EQ(got[r * c.H + j], token_of_row[r] < 0 ? junk[r * c.H + j] : x[token_of_row[r] * c.H + j])
            << "H " << c.H << " k " << c.k << " row " << r << " column " << j;
  }
}

}  // namespace
}  // namespace moe::cuda
