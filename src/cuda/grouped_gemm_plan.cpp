// The grouped GEMMs' plan: the measured policy (tile height, kernel, wgmma schedule), the tuned table as
// data, and the environment's overrides of both (core/knobs.h). Every measurement quoted is on one H200.
#include "cuda/grouped_gemm_plan.h"

#include <algorithm>
#include <bit>

#include "core/knobs.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

// The policy stages the epilogue of GEMMs of at most this reduction length (wgmma_schedule_for).
constexpr int64_t kStagedMaxK = 1024;
// ... and those of at least this reduction length over half tiles.
constexpr int64_t kStagedMinHalfTileK = 4096;
// The policy runs column pairs in gate/up GEMMs of at least this reduction length (wgmma_schedule_for).
constexpr int64_t kColumnPairsMinK = 6144;

// The tuned table: written by scripts/device/autotune_tiles.py on the H200, 2026-11-30 (--rounds 2,
// --repeats 15 (DeepSeek-V3: 10), --margin 0.02, --confirm-margin 0.01). Its two entries at 16 rows an
// expert (Qwen3 T=256, OLMoE T=128: 16-row tiles) were removed when the policy's 32-row mma.sync tiles over
// 128 weight rows beat them (2026-11-30).
constexpr TunedTilesEntry kTunedTiles[] = {
    // mixtral-8x7b T=512: wgmma, staged down only: at most 844.0 us against the policy's 868.7 or more
    {.n_experts = 8, .n = 14336, .k = 4096, .log2_tokens = 9, .tile_rows = 128, .staged_gate_up = 0,
     .staged_down = 1},
    // deepseek-v3 T=4096: wgmma, staged gate/up only: at most 7402.4 us against the policy's 7496.1 or more
    {.n_experts = 256, .n = 2048, .k = 7168, .log2_tokens = 12, .tile_rows = 128, .staged_gate_up = 1,
     .staged_down = 0},
};

WgmmaSchedule::L2Hint l2_hint(Knobs::L2Hint hint) {
  switch (hint) {
    case Knobs::L2Hint::evict_last: return WgmmaSchedule::L2Hint::evict_last;
    case Knobs::L2Hint::evict_first: return WgmmaSchedule::L2Hint::evict_first;
    case Knobs::L2Hint::normal: break;
  }
  return WgmmaSchedule::L2Hint::normal;
}

// NOTE: a tile height or kernel forced in the environment (MOE_TILE_ROWS, MOE_GROUPED_GEMM) is a choice
// being measured, so it wins over the table as it does over the policy.
bool table_enabled() {
  return knobs().tuned_tiles.value_or(true) && !forced_grouped_gemm_tile_rows() && !forced_grouped_gemm_kernel();
}

}  // namespace

// ---- the policy ------------------------------------------------------------------------------------

std::optional<int> forced_grouped_gemm_tile_rows() {
  const int64_t forced = knobs().tile_rows.value_or(0);
  return forced != 0 ? std::optional<int>(static_cast<int>(forced)) : std::nullopt;
}

int grouped_gemm_tile_rows(double rows_per_expert) {
  if (const std::optional<int> forced = forced_grouped_gemm_tile_rows()) return *forced;
  // NOTE: from 8 rows per expert on, many experts get more than 16 (balanced routing is not even), and two
  // 16-row tiles stream an expert's weights twice: Mixtral T=64 (16 rows per expert) 840 us in 16-row
  // tiles, 721 in 32-row ones (2026-11-30).
  if (rows_per_expert <= 8) return 16;
  if (rows_per_expert <= 16) return 32;
  if (rows_per_expert <= 96) return 64;
  return 128;
}

std::optional<GroupedGemmKernel> forced_grouped_gemm_kernel() {
  const std::optional<Knobs::GroupedGemm> forced = knobs().grouped_gemm;
  if (!forced) return std::nullopt;
  return *forced == Knobs::GroupedGemm::mma ? GroupedGemmKernel::mma : GroupedGemmKernel::wgmma;
}

GroupedGemmKernel grouped_gemm_kernel_for(int tile_rows) {
  if (forced_grouped_gemm_kernel() == GroupedGemmKernel::mma || !wgmma_grouped_gemm_available())
    return GroupedGemmKernel::mma;
  // NOTE: measured on the H200 (2026-11-29): wgmma with 128-row tiles beats the mma.sync kernels in both
  // prefill buckets, also at 32 rows per expert (DeepSeek-V3 T=1024: 8.98 -> 6.15 ms) where three quarters
  // of each tile are masked rows; decode (16-row tiles) stays a weight stream on mma.sync.
  // NOTE: at 9-16 rows an expert, the 32-row mma.sync tiles over 128 weight rows (2026-11-30) beat wgmma at
  // every expert count measured (DeepSeek-V3 T=512 5,689 -> 5,450 us, Qwen3 T=256 347 -> 331, OLMoE T=128
  // 239 -> 229 against the 16-row tiles the tuned table had picked there); the old 32-row tiles had lost to
  // wgmma where experts are many. 48-row mma.sync tiles at 17-32 rows an expert beat it with balanced routing
  // and lost by 12-34% with skewed routing (2026-12-01; see Mid48 in grouped_gemm.cu).
  return tile_rows >= 64 ? GroupedGemmKernel::wgmma : GroupedGemmKernel::mma;
}

int wgmma_tall_rows() {
  // NOTE: measured on the H200 (2026-11-30), with the raster policy below: Mixtral T=1024 1.47 -> 1.34-1.39
  // ms, DeepSeek-V3 T=8192 13.3 -> 12.7 ms, even elsewhere. MOE_WGMMA_TALL=on|off overrides.
  return knobs().wgmma_tall.value_or(true) ? kWgmmaTallRows : 0;
}

bool wgmma_even_tiles(int64_t rows, int64_t n_experts) {
  // NOTE: measured on the H200 (2026-11-30): a third of DeepSeek-V3 T=8192's pairs straddled two experts and
  // read each weight tile twice; even tiles 12.5 -> 11.8 ms, even elsewhere. MOE_WGMMA_EVEN_TILES=on|off
  // overrides.
  return knobs().wgmma_even_tiles.value_or(
      wgmma_schedule_for(rows, n_experts, true, /*k: pairs do not depend on it*/ 0).pairs);
}

WgmmaSchedule wgmma_schedule_for(int64_t rows, int64_t n_experts, bool gate_up, int64_t k,
                                 std::optional<bool> tuned_staged_epilogue) {
  // NOTE: measured on the H200 (2026-11-29): half tiles took DeepSeek-V3 T=1024 (32 rows per expert, nearly
  // every tile a half tile) from 6.53 to 5.92 ms, but made T=8192 (256 rows per expert, a fifth of the tiles
  // half) 23% slower: blocks that finish half tiles early drift out of step with the blocks that read the
  // same expert's weight tiles, which then come from memory more than once. So half tiles only where nearly
  // every tile is one. At 64 rows per expert (half of the tiles half; 2026-11-30, with tall tiles) they
  // measured 1.5-4% faster: Qwen3 T=1024 426 -> 420 us, Mixtral T=256 832 -> 806 us, DeepSeek-V3 T=2048
  // 6.72 -> 6.45 ms.
  // NOTE: the gathered A rows of a row tile are read by all its column tiles (16 blocks for DeepSeek-V3's
  // gate/up GEMM), which drift apart by more than the L2 holds while the weights stream through it, so
  // without a hint A came from DRAM once per column tile (2026-11-29: the GEMMs read weights + A x column
  // tiles). Evict-last keeps A in L2 ahead of the weight stream.
  // NOTE: pairs (clusters of 2 sharing weight tiles) measured (2026-11-29) 3% faster on Mixtral T=8192 (2048
  // rows per expert), 1% on DeepSeek-V3 T=8192 (256), even on Qwen3 T=8192 (512) and Mixtral T=1024 (256),
  // and 3-7% slower at 32-64 rows per expert (DeepSeek-V3 and Qwen3 T=1024), where most pairs hold a
  // half-empty tile or straddle two experts and load alone but still run in lock step.
  const bool small_experts = rows <= 64 * n_experts;  // at most 64 rows an expert: nearly every tile a half tile
  WgmmaSchedule schedule{.half_tiles = small_experts, .a_hint = WgmmaSchedule::L2Hint::evict_last,
                         .claimed_units = true, .pairs = rows >= 256 * n_experts};
  // NOTE: raster groups with pairs, measured on the H200 with tall tiles (2026-11-30): a group as high as an
  // expert's pairs (1 at 256 rows per expert, 8 at 2048) keeps the pairs that share its weight tiles together
  // and the fewest gathered rows in flight: DeepSeek-V3 T=8192 13.9 -> 12.85 ms with 1 for gate/up and 4 for
  // down; the down GEMM (short k-loops) does better with at least 4.
  // NOTE: the staged epilogue, measured on the H200 (2026-11-30): with 12 k-blocks a unit (Qwen3's down GEMM,
  // K = 768) it took the GEMM from 454 to 377 us at T=8192 (tensor pipe 51 -> 62% busy); with 32 or more
  // k-blocks and 128-row tiles its pipeline of 3 stages instead of 4 lost more than the overlap gave (Qwen3
  // T=8192's gate/up 705 -> 734 us, DeepSeek-V3 T=8192's GEMMs 3-10%, Mixtral T=1024's 4-12%, Mixtral T=512
  // +4%). But at <= 64 rows an expert and long k-loops the 3 stages pay: Mixtral T=128 808 -> 748 us (K = 4096
  // and 14336; its down GEMM 289 -> 242 us, 3.3 -> 3.9 TB/s in ncu), T=256 801 -> 764, DeepSeek-V3 T=1024 and
  // 2048 (7168 and 2048) -0.5 and -0.9%; Qwen3 T=1024 (gate/up K = 2048) +0.5%, so not below
  // kStagedMinHalfTileK. There the gain is the shallower pipeline, not the overlap: a test build with 3 stages
  // and the plain epilogue ran Mixtral T=128 in 756 us, with 2 stages 935 (4 stages: 816).
  schedule.staged_epilogue =
      tuned_staged_epilogue.value_or(k <= kStagedMaxK || (small_experts && k >= kStagedMinHalfTileK));
  // NOTE: column pairs (each A tile read from L2 once per two column tiles), measured on the H200
  // (2026-12-01) where tiles are mostly full but an expert has too few rows for pairs of row tiles:
  // DeepSeek-V3 T=4096's gate/up GEMM (K = 7168, L2 97% busy) 4.85 -> 4.48 ms under ncu, its L2-to-SM
  // sectors -15%, the layer -1.5 to -2.5%; in the down GEMMs 1.5-3% slower (two blocks in lock step over
  // shorter units), and in gate/up GEMMs of shorter K even or worse (Qwen3 T=2048, K = 2048: -0.6 to +0.4%;
  // Mixtral T=512, K = 4096: +0.4 to +1.4%). So gate/up from kColumnPairsMinK only.
  schedule.column_pairs = gate_up && k >= kColumnPairsMinK && !small_experts && !schedule.pairs;
  if (schedule.pairs) {
    const int pairs_per_expert = static_cast<int>(std::clamp<int64_t>(rows / (256 * n_experts), 1, 8));
    schedule.raster_rows = gate_up ? pairs_per_expert : std::max(4, pairs_per_expert);
  }
  // The environment's overrides (docs/tuning.md), for measuring the choices against each other in one
  // device run.
  const Knobs& env = knobs();
  schedule.half_tiles = env.wgmma_half_tiles.value_or(schedule.half_tiles);
  schedule.claimed_units = env.wgmma_claim.value_or(schedule.claimed_units);
  schedule.pairs = env.wgmma_pairs.value_or(schedule.pairs);
  schedule.column_pairs = env.wgmma_column_pairs.of(gate_up).value_or(schedule.column_pairs) && !schedule.pairs;
  schedule.staged_epilogue = env.wgmma_staged_epilogue.of(gate_up).value_or(schedule.staged_epilogue);
  if (env.wgmma_l2) {
    schedule.a_hint = l2_hint(env.wgmma_l2->a);
    schedule.b_hint = l2_hint(env.wgmma_l2->b);
  }
  if (const std::optional<int> raster_rows = env.wgmma_raster_rows.of(gate_up)) schedule.raster_rows = *raster_rows;
  return schedule;
}

// ---- the tuned table -------------------------------------------------------------------------------

std::span<const TunedTilesEntry> tuned_tiles_table() { return kTunedTiles; }

std::optional<TunedTiles> find_tuned_tiles(std::span<const TunedTilesEntry> table, int64_t n_experts, int64_t n,
                                           int64_t k, int64_t tokens) {
  if (tokens < 1) return std::nullopt;
  const int log2_tokens = std::bit_width(static_cast<uint64_t>(tokens)) - 1;
  for (const TunedTilesEntry& e : table) {
    if (e.n_experts != n_experts || e.n != n || e.k != k || e.log2_tokens != log2_tokens) continue;
    TunedTiles t{.tile_rows = e.tile_rows,
                 .kernel = e.tile_rows == 128 ? GroupedGemmKernel::wgmma : GroupedGemmKernel::mma,
                 .tuned = true};
    if (t.kernel == GroupedGemmKernel::wgmma) {
      t.staged_gate_up = e.staged_gate_up == 1;
      t.staged_down = e.staged_down == 1;
    }
    return t;
  }
  return std::nullopt;
}

std::optional<TunedTiles> tuned_tiles(int64_t n_experts, int64_t n, int64_t k, int64_t tokens) {
  if (!table_enabled()) return std::nullopt;
  const std::optional<TunedTiles> t = find_tuned_tiles(kTunedTiles, n_experts, n, k, tokens);
  if (t && t->kernel == GroupedGemmKernel::wgmma && !wgmma_grouped_gemm_available()) return std::nullopt;
  return t;
}

bool tuned_tiles_use_wgmma(int64_t n_experts, int64_t n, int64_t k, int64_t max_tokens) {
  for (int64_t tokens = 1; tokens <= max_tokens; tokens *= 2) {
    const std::optional<TunedTiles> t = tuned_tiles(n_experts, n, k, tokens);
    if (t && t->kernel == GroupedGemmKernel::wgmma) return true;
  }
  return false;
}

// ---- the plan --------------------------------------------------------------------------------------

RoutedGemmPlan routed_gemm_plan(int64_t n_experts, int64_t top_k, int64_t n, int64_t k, int64_t tokens,
                                int64_t capacity) {
  if (capacity < 0) {
    if (const std::optional<TunedTiles> t = tuned_tiles(n_experts, n, k, tokens)) return *t;
  }
  const int tile_rows = grouped_gemm_tile_rows(capacity < 0 ? double(tokens * top_k) / n_experts : double(capacity));
  return {.tile_rows = tile_rows, .kernel = grouped_gemm_kernel_for(tile_rows)};
}

}  // namespace moe::cuda
