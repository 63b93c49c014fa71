#pragma once
// The routed experts' grouped-GEMM choices measured per layer shape and batch size on the H200
// (scripts/device/autotune_tiles.py writes the table, src/cuda/tuned_tiles.inc). Where a shape or a batch
// size was not measured, the layer keeps the hand-written policy (grouped_gemm_tile_rows,
// grouped_gemm_kernel_for, wgmma_schedule_for): that is the default for unseen shapes.

#include <cstdint>
#include <optional>
#include <span>

#include "moe/cuda/ops.h"

namespace moe::cuda {

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

// What the layer runs its routed experts' GEMMs with for a batch of `tokens` (n = the intermediate size,
// k = the hidden size; capacity < 0: the contiguous paradigm, else rows per expert): the tuned table's
// choice for contiguous batches where it has one, else the policy (staged epilogues unset: the policy's).
RoutedGemmPlan routed_gemm_plan(int64_t n_experts, int64_t top_k, int64_t n, int64_t k, int64_t tokens,
                                int64_t capacity);

}  // namespace moe::cuda
