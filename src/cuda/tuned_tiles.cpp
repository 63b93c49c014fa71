#include "moe/cuda/tuned_tiles.h"

#include <bit>
#include <vector>

#include "moe/core/env.h"

namespace moe::cuda {

namespace {

const std::vector<TunedTilesEntry>& table() {
  static const std::vector<TunedTilesEntry> entries = {
#include "tuned_tiles.inc"
  };
  return entries;
}

// NOTE: a tile height or kernel forced in the environment (MOE_TILE_ROWS, MOE_GROUPED_GEMM) is a choice
// being measured, so it wins over the table as it does over the policy.
bool table_enabled() {
  static const bool enabled =
      env_on_off("MOE_TUNED_TILES", "whether the layer takes the tuned grouped-GEMM table's tile choices")
          .value_or(true) &&
      !forced_grouped_gemm_tile_rows() && !forced_grouped_gemm_kernel();
  return enabled;
}

}  // namespace

std::span<const TunedTilesEntry> tuned_tiles_table() { return table(); }

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
  const std::optional<TunedTiles> t = find_tuned_tiles(table(), n_experts, n, k, tokens);
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

RoutedGemmPlan routed_gemm_plan(int64_t n_experts, int64_t top_k, int64_t n, int64_t k, int64_t tokens,
                                int64_t capacity) {
  if (capacity < 0) {
    if (const std::optional<TunedTiles> t = tuned_tiles(n_experts, n, k, tokens)) return *t;
  }
  const int tile_rows = grouped_gemm_tile_rows(capacity < 0 ? double(tokens * top_k) / n_experts : double(capacity));
  return {.tile_rows = tile_rows, .kernel = grouped_gemm_kernel_for(tile_rows)};
}

}  // namespace moe::cuda
