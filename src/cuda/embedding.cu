// The embedding lookup: a block a row, the bf16 table row widened to the fp32 residual stream.
#include "cuda/check.h"
#include "cuda/decoder_kernels.h"

namespace moe::cuda {

namespace {

__global__ void embedding_kernel(const bf16* __restrict__ table, int64_t hidden,
                                 const int32_t* __restrict__ ids, float* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const bf16* src = table + int64_t{ids[row]} * hidden;
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) out[row * hidden + c] = __bfloat162float(src[c]);
}

}  // namespace

void embedding(const bf16* table, int64_t hidden, const int32_t* ids, int64_t n, float* out,
               cudaStream_t stream) {
  if (n == 0) return;
  embedding_kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(table, hidden, ids, out);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
