// RMSNorm as transformers computes it (normalise in fp32, then multiply by the weight): the decoder's
// residual add fused with the norm after it (a block a row), and the in-place group norms of q/k heads and
// of MLA's latent (a warp a group).
#include <algorithm>
#include <string>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/launch.h"

namespace moe::cuda {

namespace {

constexpr int kNormThreads = 256;

__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A thread holds PER values of the row (columns threadIdx.x + i · blockDim.x) from the add to the norm, and
// the norm's weights are read before the wait for the kernel before (they are not its outputs).
template <int PER>
__global__ void add_rms_norm_kernel(float* __restrict__ residual, const bf16* __restrict__ delta_bf16,
                                    const float* __restrict__ delta_f32, const float* __restrict__ weight,
                                    int64_t hidden, float eps, bf16* __restrict__ out) {
  __shared__ float partial[32];
  allow_dependent_launch();
  float w[PER], v[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * blockDim.x;
    w[i] = c < hidden ? weight[c] : 0.0f;
  }
  wait_for_prior_grids();  // the residual and delta come from the kernels before
  float* x = residual + blockIdx.x * hidden;
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * blockDim.x;
    v[i] = 0.0f;
    if (c >= hidden) continue;
    v[i] = x[c];
    if (delta_bf16) v[i] += __bfloat162float(delta_bf16[blockIdx.x * hidden + c]);
    if (delta_f32) v[i] += delta_f32[blockIdx.x * hidden + c];
    x[c] = v[i];
    squares += v[i] * v[i];
  }
  const float inv = rsqrtf(block_sum(squares, partial) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * blockDim.x;
    if (c < hidden) out[blockIdx.x * hidden + c] = __float2bfloat16(v[i] * inv * w[i]);
  }
}

// A warp a group (row r, group g): columns [g · width, (g + 1) · width) of row r.
__global__ void rms_norm_kernel(bf16* __restrict__ x, int64_t n_groups, int64_t groups, int64_t row_stride,
                                int64_t width, const float* __restrict__ weight, float eps) {
  const int64_t item = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  allow_dependent_launch();
  wait_for_prior_grids();  // the inputs come from the kernel before
  if (item >= n_groups) return;  // uniform over the warp
  bf16* p = x + (item / groups) * row_stride + (item % groups) * width;
  float squares = 0.0f;
  for (int64_t c = lane; c < width; c += 32) {
    const float v = __bfloat162float(p[c]);
    squares += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
  const float inv = rsqrtf(squares / static_cast<float>(width) + eps);
  for (int64_t c = lane; c < width; c += 32)
    p[c] = __float2bfloat16(__bfloat162float(p[c]) * inv * weight[c]);
}

}  // namespace

void add_rms_norm(float* residual, const bf16* delta_bf16, const float* delta_f32, const float* weight,
                  int64_t rows, int64_t hidden, float eps, bf16* out, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(hidden >= 1 && hidden <= 32 * 1024,
                   "add_rms_norm: hidden size " + std::to_string(hidden) + " is outside [1, 32768]");
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows));
  if (hidden <= 8 * 1024) {
    const auto threads = static_cast<unsigned>(std::max<int64_t>(32, (hidden + 8 * 32 - 1) / (8 * 32) * 32));
    launch_dependent(add_rms_norm_kernel<8>, grid, dim3(threads), 0, stream, residual, delta_bf16, delta_f32, weight,
                     hidden, eps, out);
  } else {
    launch_dependent(add_rms_norm_kernel<32>, grid, dim3(1024), 0, stream, residual, delta_bf16, delta_f32, weight,
                     hidden, eps, out);
  }
  MOE_CUDA_CHECK_LAUNCH();
}

void rms_norm(bf16* x, int64_t rows, int64_t row_stride, int64_t groups, int64_t width, const float* weight,
              float eps, cudaStream_t stream) {
  const int64_t n_groups = rows * groups;
  if (n_groups == 0) return;
  constexpr int64_t kWarps = kNormThreads / 32;
  launch_dependent(rms_norm_kernel, dim3(static_cast<unsigned>((n_groups + kWarps - 1) / kWarps)), dim3(kNormThreads),
                   0, stream, x, n_groups, groups, row_stride, width, weight, eps);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
