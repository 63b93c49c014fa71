// FP8 e4m3 on the device (quant/fp8_block.h's format and rounding): block-scaled weights, one block of 256
// threads per 128x128 weight block, which finds the block's amax, then writes its scale and its e4m3
// values; and the W8A8 activations, one warp per row and 128-value group.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "cuda/check.h"
#include "cuda/launch.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kBlock = 128, kThreads = 256;
constexpr float kE4m3Max = 448.0f;

static __global__ void __launch_bounds__(kThreads)
    quantize_fp8_block_kernel(const bf16* __restrict__ w, int64_t rows, int64_t cols,
                              uint8_t* __restrict__ values, float* __restrict__ scales,
                              int* __restrict__ non_finite) {
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock, col_blocks = (cols + kBlock - 1) / kBlock;
  const int64_t mat = blockIdx.z, bi = blockIdx.y, bj = blockIdx.x;
  const int64_t r0 = bi * kBlock, c0 = bj * kBlock;
  const int r_n = static_cast<int>(min(int64_t{kBlock}, rows - r0)),
            c_n = static_cast<int>(min(int64_t{kBlock}, cols - c0));
  const bf16* src = w + mat * rows * cols + r0 * cols + c0;
  uint8_t* dst = values + mat * rows * cols + r0 * cols + c0;
  __shared__ float warp_amax[kThreads / 32];
  __shared__ float block_scale;

  float amax = 0.0f;
  for (int i = threadIdx.x; i < r_n * kBlock; i += kThreads) {
    const int r = i / kBlock, c = i % kBlock;
    if (c < c_n) amax = fmaxf(amax, fabsf(__bfloat162float(src[int64_t{r} * cols + c])));
  }
  // NOTE: fmaxf drops NaNs, so non-finite values are looked for on their own.
  bool bad = false;
  for (int i = threadIdx.x; i < r_n * kBlock; i += kThreads) {
    const int r = i / kBlock, c = i % kBlock;
    if (c < c_n && !isfinite(__bfloat162float(src[int64_t{r} * cols + c]))) bad = true;
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(non_finite, 1);
  for (int offset = 16; offset > 0; offset /= 2)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (int i = 0; i < kThreads / 32; ++i) m = fmaxf(m, warp_amax[i]);
    block_scale = m > 0.0f ? m / kE4m3Max : 1.0f;
    scales[(mat * row_blocks + bi) * col_blocks + bj] = block_scale;
  }
  __syncthreads();
  const float scale = block_scale;
  for (int i = threadIdx.x; i < r_n * kBlock; i += kThreads) {
    const int r = i / kBlock, c = i % kBlock;
    if (c >= c_n) continue;
    const float x = __bfloat162float(src[int64_t{r} * cols + c]) / scale;  // IEEE division, as on the CPU
    dst[int64_t{r} * cols + c] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  }
}

// Each lane holds 4 of its group's 128 values (one 8-byte load, one 4-byte store).
static __global__ void __launch_bounds__(kThreads)
    quantize_rows_fp8_kernel(const bf16* __restrict__ x, int64_t groups, uint8_t* __restrict__ values,
                             float* __restrict__ scales) {
  wait_for_prior_grids();
  allow_dependent_launch();  // every block is resident by then: the next kernel cannot take its slots
  const int64_t group = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  if (group >= groups) return;  // whole warps: groups are warp-aligned
  const int lane = threadIdx.x % 32;
  const uint2 raw = *reinterpret_cast<const uint2*>(x + group * kBlock + lane * 4);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x),
                       hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  const float v[4] = {__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)};
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  if (lane == 0) scales[group] = scale;
  uint32_t packed = 0;
  for (int i = 0; i < 4; ++i)
    packed |= uint32_t{__nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3)} << (8 * i);
  *reinterpret_cast<uint32_t*>(values + group * kBlock + lane * 4) = packed;
}

}  // namespace

void quantize_rows_fp8(const bf16* x, int64_t rows, int64_t cols, uint8_t* values, float* scales,
                       cudaStream_t stream) {
  MOE_CUDA_REQUIRE(rows >= 0 && cols % kBlock == 0,
                   "quantize_rows_fp8: columns " + std::to_string(cols) + " must be a multiple of 128");
  const int64_t groups = rows * cols / kBlock;
  if (groups == 0) return;
  const dim3 grid(static_cast<unsigned>((groups * 32 + kThreads - 1) / kThreads));
  launch_dependent(quantize_rows_fp8_kernel, grid, dim3(kThreads), 0, stream, x, groups, values, scales);
}

void quantize_fp8_block(const bf16* w, int64_t mats, int64_t rows, int64_t cols, uint8_t* values,
                        float* scales, int* non_finite, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(
      mats >= 0 && rows >= 0 && cols >= 0 && mats <= 65535,
      "quantize_fp8_block: sizes must be >= 0 and at most 65535 matrices, got " + std::to_string(mats));
  if (mats == 0 || rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock),
                  static_cast<unsigned>((rows + kBlock - 1) / kBlock), static_cast<unsigned>(mats));
  quantize_fp8_block_kernel<<<grid, kThreads, 0, stream>>>(w, rows, cols, values, scales, non_finite);
  MOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
