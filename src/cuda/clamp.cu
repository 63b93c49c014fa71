// clip_qkv (OLMoE): every element clamped to [-clip, clip].
#include <algorithm>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"

namespace moe::cuda {

namespace {

__global__ void clamp_kernel(bf16* __restrict__ x, int64_t n, float clip) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __float2bfloat16(fminf(fmaxf(__bfloat162float(x[i]), -clip), clip));
}

}  // namespace

void clamp(bf16* x, int64_t n, float clip, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  clamp_kernel<<<blocks, 256, 0, stream>>>(x, n, clip);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
