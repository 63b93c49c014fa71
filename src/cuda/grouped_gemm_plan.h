#pragma once
// How the routed experts' grouped GEMMs run a batch: the tile height of the mma.sync kernels, whether the
// Hopper wgmma kernel takes it instead, and the wgmma kernel's schedule. Two sources, both data:
//   the policy    hand-written thresholds from measurements on the H200 (grouped_gemm_plan.cpp says which);
//   the table     choices measured per layer shape and batch size (scripts/device/autotune_tiles.py writes
//                 its rows), which win where they have an entry.
// The MOE_TILE_ROWS, MOE_GROUPED_GEMM, MOE_TUNED_TILES and MOE_WGMMA_* knobs (core/knobs.h,
// docs/tuning.md) override both, to measure the choices against each other on one machine.
// Host code only; every choice computes the same result.

#include <cstdint>
#include <optional>
#include <span>

namespace moe::cuda {

// ---- the policy ------------------------------------------------------------------------------------

// The tile height for a batch of rows_per_expert rows per expert on average: 16, 32 (weight streams),
// 64, 128 (prefill). MOE_TILE_ROWS forces one (48 as well), to measure.
int grouped_gemm_tile_rows(double rows_per_expert);
// MOE_TILE_ROWS's tile height where it forces one (not unset, empty or 0).
std::optional<int> forced_grouped_gemm_tile_rows();

// Which kernel the layer runs for a batch whose mma.sync tile height would be tile_rows: wgmma where it is
// available and tile_rows >= 64 (prefill), else mma.sync, at any expert count. MOE_GROUPED_GEMM=mma in the
// environment forces mma.sync (MOE_GROUPED_GEMM=wgmma keeps the policy), for measuring both on one machine.
enum class GroupedGemmKernel { mma, wgmma };
GroupedGemmKernel grouped_gemm_kernel_for(int tile_rows);
// MOE_GROUPED_GEMM's kernel where it is set (mma or wgmma; checked), else nullopt.
std::optional<GroupedGemmKernel> forced_grouped_gemm_kernel();

// How the wgmma kernel orders and sizes its work units; every choice computes the same result.
struct WgmmaSchedule {
  // A tile with at most 64 valid rows runs on one consumer warpgroup.
  bool half_tiles = false;
  // Row tiles that walk the column tiles together.
  int raster_rows = 8;
  // L2 eviction priorities of the TMA loads: A (the gathered activations, re-read by every column tile of
  // their row tile) and B (the weights, read by the row tiles of their expert at about the same time).
  enum class L2Hint { normal, evict_last, evict_first };
  L2Hint a_hint = L2Hint::normal;
  L2Hint b_hint = L2Hint::normal;
  // Blocks claim work units in order from a counter as they finish one (true), or walk a fixed stride of
  // the unit list (false).
  bool claimed_units = false;
  // Clusters of 2 blocks on pairs of row tiles, which load a weight tile shared by both once (multicast).
  bool pairs = false;
  // Clusters of 2 blocks on pairs of column tiles of one row tile, which load its A tile once (each block 64
  // of its rows, multicast); not with pairs.
  bool column_pairs = false;
  // The consumers leave a unit's output in shared memory for three store warps and go on to the next
  // unit's k-loop (a pipeline of 3 stages instead of 4).
  bool staged_epilogue = false;
};

// The rows a wgmma tall tile holds past its 128 (the kernel's wgmma N for them).
constexpr int kWgmmaTallRows = 32;
// The tall_rows of the wgmma kernel's tile maps: a segment's last 128-row tile takes up to this many more
// rows (32), so that a segment of 256 + 5 rows runs as two tiles, not three; MOE_WGMMA_TALL=off gives 0.
int wgmma_tall_rows();
// Whether the wgmma kernel's tile map for `rows` rows over `n_experts` segments takes even tiles (TileMap):
// where its schedule pairs row tiles, so that every pair shares its weight tile.
bool wgmma_even_tiles(int64_t rows, int64_t n_experts);
// The measured policy for `rows` rows over `n_experts` segments, for the gate/up GEMM or the down GEMM of
// reduction length k (half tiles only where nearly every tile is one; the staged epilogue at short k, and
// at long k over experts of at most 64 rows); MOE_WGMMA_HALF_TILES=on|off, MOE_WGMMA_RASTER_ROWS=N
// or <gate/up N>,<down N>, MOE_WGMMA_L2=<A hint>,<B hint> (each normal, last or first),
// MOE_WGMMA_CLAIM=on|off, MOE_WGMMA_PAIRS=on|off, MOE_WGMMA_COLUMN_PAIRS and MOE_WGMMA_STAGED_EPILOGUE
// (on|off or <gate/up>,<down>) in the environment override it. tuned_staged_epilogue (a tuned table's
// choice) replaces the policy's staged epilogue, below the environment's override.
WgmmaSchedule wgmma_schedule_for(int64_t rows, int64_t n_experts, bool gate_up, int64_t k,
                                 std::optional<bool> tuned_staged_epilogue = std::nullopt);

// ---- the tuned table -------------------------------------------------------------------------------

// One measured point, keyed by the gate/up GEMM's shape (n_experts, N = the intermediate size, K = the
// hidden size) and the batch's token bucket: T in [2^log2_tokens, 2^(log2_tokens + 1)).
struct TunedTilesEntry {
  int32_t n_experts, n, k, log2_tokens;
  int32_t tile_rows;        // 16, 32 or 64: mma.sync tiles; 128: the wgmma kernel
  int8_t staged_gate_up;    // wgmma: 1 staged epilogue, 0 plain; mma.sync: -1
  int8_t staged_down;
};

struct TunedTiles {
  int tile_rows = 0;
  GroupedGemmKernel kernel = GroupedGemmKernel::mma;
  std::optional<bool> staged_gate_up = std::nullopt, staged_down = std::nullopt;  // wgmma only
  bool tuned = false;  // from a table (find_tuned_tiles), not the policy
  bool operator==(const TunedTiles&) const = default;
};
using RoutedGemmPlan = TunedTiles;

// The committed table.
std::span<const TunedTilesEntry> tuned_tiles_table();
// The entry of `table` for this shape and T's bucket, or nullopt.
std::optional<TunedTiles> find_tuned_tiles(std::span<const TunedTilesEntry> table, int64_t n_experts, int64_t n,
                                           int64_t k, int64_t tokens);
// The committed table's choice, or nullopt where it has none, where it wants the wgmma kernel and that is
// unavailable, or where MOE_TUNED_TILES=off (to measure the policy, or to tune) or MOE_TILE_ROWS or
// MOE_GROUPED_GEMM force a choice (MOE_TILE_ROWS=0 forces none).
std::optional<TunedTiles> tuned_tiles(int64_t n_experts, int64_t n, int64_t k, int64_t tokens);
// Whether tuned_tiles sends any batch of 1..max_tokens tokens of this shape to the wgmma kernel.
bool tuned_tiles_use_wgmma(int64_t n_experts, int64_t n, int64_t k, int64_t max_tokens);

// ---- the plan --------------------------------------------------------------------------------------

// What the layer runs its routed experts' GEMMs with for a batch of `tokens` (n = the intermediate size,
// k = the hidden size; capacity < 0: the contiguous paradigm, else rows per expert): the tuned table's
// choice for contiguous batches where it has one, else the policy (staged epilogues unset: the policy's).
RoutedGemmPlan routed_gemm_plan(int64_t n_experts, int64_t top_k, int64_t n, int64_t k, int64_t tokens,
                                int64_t capacity);

}  // namespace moe::cuda
