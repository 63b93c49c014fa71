#pragma once
// The fused decode kernel's INT4 tiles (int4_tiles.h) on tensor cores: one warp multiplies a 16-row x
// 128-input tile by up to 8 token columns with 8 m16n8k16 steps. Each nibble becomes a bf16 by bit moves
// (0x4300 | q is 128 + q) and the zero point is subtracted in bf16x2, exactly (small integers), so the
// products are those of (q - zero) and the bf16 activations; the fp32 sums of a group are then multiplied
// by the rows' f16 scales.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/mma.cuh"

namespace moe::cuda {

// The pair of inputs p (0..3) of a tile word as bf16x2 (q - zero), zz = (128 + zero) in both halves.
__device__ __forceinline__ unsigned int4_pair(uint32_t word, int p, uint32_t zz) {
  const uint32_t biased = ((word >> (4 * p)) & 0x000f000fu) | 0x43004300u;  // 128 + q, two bf16
  const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                   *reinterpret_cast<const __nv_bfloat162*>(&zz));
  return *reinterpret_cast<const unsigned*>(&d);
}

__device__ __forceinline__ uint32_t int4_word(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// (128 + zero) in both halves of a bf16x2, from a scale_zero entry.
__device__ __forceinline__ uint32_t int4_zero_pair(uint32_t scale_zero) {
  const uint32_t z = scale_zero >> 16;
  return 0x43004300u | z | (z << 16);
}

__device__ __forceinline__ float int4_scale(uint32_t scale_zero) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(scale_zero & 0xffffu)));
}

// acc (the C fragment: rows r and r + 8 of the tile, r = lane / 4; token columns 2c and 2c + 1, c = lane % 4)
// += the tile's group (this lane's 16 bytes of row r in lo, of row r + 8 in hi; their scale_zero entries)
// times the activations: b points at this lane's column's (token lane / 4) 128 values of the group, or is
// null for a zero column.
__device__ __forceinline__ void int4_tile_mma(float (&acc)[4], const uint4& lo, const uint4& hi, uint32_t sz_lo,
                                              uint32_t sz_hi, const __nv_bfloat16* b, int c) {
  float even[4] = {}, odd[4] = {};  // two chains of dependent mma steps, not one of eight
  const uint32_t z_lo = int4_zero_pair(sz_lo), z_hi = int4_zero_pair(sz_hi);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t wl = int4_word(lo, j / 2), wh = int4_word(hi, j / 2);
    const int p = 2 * (j % 2);
    const unsigned a[4] = {int4_pair(wl, p, z_lo), int4_pair(wh, p, z_hi), int4_pair(wl, p + 1, z_lo),
                           int4_pair(wh, p + 1, z_hi)};
    const uint2 x = b != nullptr ? *reinterpret_cast<const uint2*>(b + 16 * j + 4 * c) : make_uint2(0, 0);
    mma_bf16(j % 2 == 0 ? even : odd, a, x.x, x.y);
  }
  const float s_lo = int4_scale(sz_lo), s_hi = int4_scale(sz_hi);
  acc[0] = fmaf(s_lo, even[0] + odd[0], acc[0]);
  acc[1] = fmaf(s_lo, even[1] + odd[1], acc[1]);
  acc[2] = fmaf(s_hi, even[2] + odd[2], acc[2]);
  acc[3] = fmaf(s_hi, even[3] + odd[3], acc[3]);
}

}  // namespace moe::cuda
