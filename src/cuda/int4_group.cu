// INT4 experts on the device: quant/int4_awq.h's round-to-nearest with zero points, bit for bit, into the
// decode kernel's tile layout (int4_tiles.h). One warp per row and 128-input group: each lane holds 4
// consecutive inputs, the group's min and max are reduced over the warp, and the lanes of k-steps 2w and
// 2w + 1 (4 apart) put their nibbles into one word.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/check.h"
#include "cuda/int4_tiles.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kMaxQ = 15.0f, kMinRange = 1e-5f;  // AutoAWQ's (quant/int4_awq.cpp)

static __global__ void __launch_bounds__(kThreads)
    quantize_int4_tiles_kernel(const bf16* __restrict__ w, int64_t rows, int64_t cols,
                               uint8_t* __restrict__ values, uint32_t* __restrict__ scale_zero,
                               int* __restrict__ non_finite) {
  const int64_t groups = cols / kInt4Group;
  const int64_t item = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;  // (row, group)
  if (item >= rows * groups) return;  // whole warps
  const int lane = threadIdx.x % 32;
  const int64_t n = item / groups, k0 = item % groups * kInt4Group + 4 * lane;
  const uint2 raw = *reinterpret_cast<const uint2*>(w + n * cols + k0);
  const __nv_bfloat162 lo2 = *reinterpret_cast<const __nv_bfloat162*>(&raw.x),
                       hi2 = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  const float v[4] = {__low2float(lo2), __high2float(lo2), __low2float(hi2), __high2float(hi2)};
  // NOTE: fminf / fmaxf drop NaNs, so non-finite values are looked for on their own.
  const bool bad = !(isfinite(v[0]) && isfinite(v[1]) && isfinite(v[2]) && isfinite(v[3]));
  if (__any_sync(0xffffffffu, bad) && lane == 0) atomicExch(non_finite, 1);
  float lo = fminf(fminf(v[0], v[1]), fminf(v[2], v[3])), hi = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
  }
  // IEEE division and round-half-even, as the CPU's (the scale rounded to f16 before use).
  const __half scale_h = __float2half_rn(fmaxf(hi - lo, kMinRange) / kMaxQ);
  const float scale = __half2float(scale_h);
  const float zero = fminf(fmaxf(rintf(-lo / scale), 0.0f), kMaxQ);
  uint32_t bits = 0;  // this lane's 4 nibbles at their places in the word (int4_tiles.h)
  for (int o = 0; o < 4; ++o) {
    const auto q = static_cast<uint32_t>(fminf(fmaxf(rintf(v[o] / scale) + zero, 0.0f), kMaxQ));
    const Int4Position at = int4_tile_position(n, k0 + o, cols);
    bits |= q << (at.byte % 4 * 8 + at.shift);
  }
  bits |= __shfl_down_sync(0xffffffffu, bits, 4);  // the odd k-step's lane: 4 lanes on
  // Lanes of even k-steps (j = lane / 4 even) write the word.
  if ((lane / 4) % 2 == 0) {
    const Int4Position at = int4_tile_position(n, k0, cols);
    *reinterpret_cast<uint32_t*>(values + at.byte / 4 * 4) = bits;
  }
  if (lane == 0)
    scale_zero[int4_scale_zero_index(n, k0, cols)] =
        uint32_t{__half_as_ushort(scale_h)} | static_cast<uint32_t>(zero) << 16;
}

}  // namespace

void quantize_int4_tiles(const bf16* w, int64_t rows, int64_t cols, uint8_t* values, uint32_t* scale_zero,
                         int* non_finite, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(rows >= 0 && rows % kInt4TileRows == 0 && cols % kInt4Group == 0,
                   "quantize_int4_tiles: rows " + std::to_string(rows) + " must be a multiple of 16 and columns " +
                       std::to_string(cols) + " of 128");
  const int64_t warps = rows * (cols / kInt4Group);
  if (warps == 0) return;
  const dim3 grid(static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads));
  quantize_int4_tiles_kernel<<<grid, kThreads, 0, stream>>>(w, rows, cols, values, scale_zero, non_finite);
  MOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
