#include "cuda/permute_workspace.h"

#include <algorithm>
#include <utility>

#include "moe/core/check.h"

namespace moe::cuda {

PermuteWorkspace::PermuteWorkspace(int64_t n_segments, int64_t max_pairs, int64_t max_rows)
    : n_segments_(n_segments), max_rows_(max_rows) {
  // Bound for every tile height: the sum over segments of ceil(count / tile_rows) <= rows + segments, and
  // even tiles add at most one a segment.
  const int64_t max_tiles = max_rows + 2 * n_segments;
  const int64_t chunk_counts = permute_chunk_count(max_pairs) * n_segments;
  ints_ = DeviceBuffer<int32_t>(5 * n_segments + 2 * max_pairs + chunk_counts + max_rows + 2 * max_tiles + 1);
  int32_t* p = ints_.get();
  auto carve = [&p](int64_t n) { return std::exchange(p, p + n); };
  buffers_.expert_counts = carve(n_segments);
  buffers_.count_prefix = carve(n_segments);
  buffers_.expert_offsets = carve(n_segments);
  buffers_.segment_counts = carve(n_segments);
  buffers_.dropped = carve(n_segments);
  buffers_.pair_rank = carve(max_pairs);
  buffers_.chunk_counts = carve(chunk_counts);
  buffers_.row_token = carve(max_rows);
  buffers_.pair_rows = carve(max_pairs);
  tile_expert_ = carve(max_tiles);
  tile_row_ = carve(max_tiles);
  n_tiles_ = carve(1);
  pair_weights_ = DeviceBuffer<float>(max_pairs);
  buffers_.pair_weights = pair_weights_.get();
}

TileMap PermuteWorkspace::tile_map(int tile_rows, int64_t rows, int tall_rows, bool even_tiles) const {
  MOE_CHECK(tile_rows >= 1 && rows >= 0 && rows <= max_rows_,
            "tile map of {} rows in tiles of {}: the workspace holds {} rows", rows, tile_rows, max_rows_);
  MOE_CHECK(tall_rows >= 0 && tall_rows < tile_rows, "tile map: tall_rows {} must be in [0, tile rows {})", tall_rows,
            tile_rows);
  // NOTE: tall tiles only merge tiles, so the bound without them holds.
  const int64_t with_rows = std::min<int64_t>(rows, (rows + tile_rows - 1) / tile_rows + n_segments_);
  return {.tile_rows = tile_rows, .tile_expert = tile_expert_, .tile_row = tile_row_, .n_tiles = n_tiles_,
          .max_tiles = with_rows + (even_tiles ? n_segments_ : 0), .tall_rows = tall_rows, .even_tiles = even_tiles};
}

}  // namespace moe::cuda
