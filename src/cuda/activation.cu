// The elementwise tails of the dense GEMMs: SwiGLU's silu(gate) · up, and a bias added to a bf16 output.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"

namespace moe::cuda {

namespace {

__global__ void silu_mul_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up, int64_t n,
                                bf16* __restrict__ out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    out[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * __bfloat162float(up[i]));
  }
}

__global__ void add_bias_kernel(bf16* __restrict__ y, int64_t n, int64_t cols,
                                const float* __restrict__ bias) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __float2bfloat16(__bfloat162float(y[i]) + bias[i % cols]);
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
}

}  // namespace

void silu_mul(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t stream) {
  if (n == 0) return;
  silu_mul_kernel<<<grid_for(n), 256, 0, stream>>>(gate, up, n, out);
  MOE_CUDA_CHECK_LAUNCH();
}

void add_bias(bf16* y, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<grid_for(rows * cols), 256, 0, stream>>>(y, rows * cols, cols, bias);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
