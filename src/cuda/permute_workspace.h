#pragma once
// The device workspace of the permute (ops.h) and of its tile map, sized once for the largest batch. The
// single-GPU layer and the expert-parallel layer permute the same way and both carve it from here.

#include <cstdint>

#include "cuda/device_buffer.h"
#include "cuda/ops.h"

namespace moe::cuda {

class PermuteWorkspace {
 public:
  PermuteWorkspace() = default;
  // Up to max_pairs (token, expert) pairs over n_segments segments of max_rows rows in all (max_pairs in
  // the contiguous layout, n_segments * capacity in the padded one).
  PermuteWorkspace(int64_t n_segments, int64_t max_pairs, int64_t max_rows);

  const PermuteBuffers& buffers() const { return buffers_; }
  // The tile map of tiles of tile_rows (>= 1) over `rows` (<= max_rows) rows: at most min(rows,
  // ceil(rows / tile_rows) + n_segments) tiles (a tile never straddles two segments), and with even_tiles
  // at most n_segments more; tall_rows and even_tiles as in TileMap.
  TileMap tile_map(int tile_rows, int64_t rows, int tall_rows = 0, bool even_tiles = false) const;

 private:
  int64_t n_segments_ = 0, max_rows_ = 0;
  DeviceBuffer<int32_t> ints_;  // the int32 arrays of buffers_ and of the tile map, carved in order
  DeviceBuffer<float> pair_weights_;
  PermuteBuffers buffers_{};
  int32_t *tile_expert_ = nullptr, *tile_row_ = nullptr, *n_tiles_ = nullptr;
};

}  // namespace moe::cuda
