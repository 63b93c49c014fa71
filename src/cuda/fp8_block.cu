// FP8 e4m3 block-scaled weights on the device (quant/fp8_block.h's format and rounding): one block of
// 256 threads per 128x128 weight block finds the block's amax, then writes its scale and its e4m3 values.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "cuda/check.h"
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

}  // namespace

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
