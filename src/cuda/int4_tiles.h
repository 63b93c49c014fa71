#pragma once
// INT4 experts on the GPU (W4A16, one scale and zero point per 128 inputs of a row: quant/int4_awq.h's
// values, in a layout of our own made for the decode kernel's mma.sync fragments). A matrix [N, K] (N a
// multiple of 16, K of 128) is stored as tiles of 16 rows x 128 inputs (one scale group), 1024 bytes each,
// tile (n / 16, k / 128) at byte ((n / 16) * (K / 128) + k / 128) * 1024, so a row tile's groups follow each
// other. A tile holds what the 32 lanes of a warp need for the 8 k-steps of m16n8k16 over its group: lane
// l = 4 r + c takes rows r and r + 8 (bytes l * 16 and 512 + l * 16, 16 bytes each) at inputs
// 16 j + 4 c + o (k-step j = 0..7, o = 0..3); word w = j / 2 of the 16 bytes holds k-steps 2w and 2w + 1, and
// its nibble [0, 4, 1, 5, 2, 6, 3, 7][4 (j % 2) + o] holds input o of step j: so (word >> 4p) & 0x000f000f
// is a pair of consecutive inputs, the low and high halves of one bf16x2 fragment register (p = 0, 1 for an
// even step, 2, 3 for an odd one). scale_zero[tile * 16 + n % 16] is the f16 scale's bits | zero << 16.
// weight[n][k] = (q - zero) x scale.

#include <cstdint>

#if defined(__CUDACC__)
#define MOE_INT4_HD __host__ __device__
#else
#define MOE_INT4_HD
#endif

namespace moe::cuda {

constexpr int64_t kInt4Group = 128, kInt4TileRows = 16, kInt4TileBytes = 1024;

struct Int4Position {
  int64_t byte;  // the byte holding the value
  int shift;     // its bits: (byte >> shift) & 0xf
};

MOE_INT4_HD inline Int4Position int4_tile_position(int64_t n, int64_t k, int64_t K) {
  const int64_t tile = (n / kInt4TileRows) * (K / kInt4Group) + k / kInt4Group;
  const int rr = static_cast<int>(n % kInt4TileRows), kk = static_cast<int>(k % kInt4Group);
  const int j = kk / 16, c = (kk % 16) / 4, o = kk % 4;
  const int lane = (rr % 8) * 4 + c, u = (j % 2) * 4 + o, nibble = (u % 2) * 4 + u / 2;
  return {tile * kInt4TileBytes + (rr / 8) * 512 + lane * 16 + (j / 2) * 4 + nibble / 2, (nibble % 2) * 4};
}

MOE_INT4_HD inline int64_t int4_scale_zero_index(int64_t n, int64_t k, int64_t K) {
  return ((n / kInt4TileRows) * (K / kInt4Group) + k / kInt4Group) * kInt4TileRows + n % kInt4TileRows;
}

}  // namespace moe::cuda

#undef MOE_INT4_HD
