// Rotary position embeddings in place on bf16 heads, the angle in fp32 (inv_freq · position) and cos/sin
// scaled by the attention factor, as transformers 5.17 (and cpu/rope.cpp). A block a (row, head), a thread a
// rotary pair: every pair is read before any is written, since pairs_to_halves moves outputs across pairs.
#include <string>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/launch.h"

namespace moe::cuda {

namespace {

__global__ void rope_kernel(RopeArgs a) {
  allow_dependent_launch();
  wait_for_prior_grids();  // the inputs come from the kernel before
  const int64_t row = blockIdx.x / a.heads, head = blockIdx.x % a.heads;
  const int i = threadIdx.x;
  const int64_t row_stride = a.row_stride > 0 ? a.row_stride : a.heads * a.head_stride;
  bf16* x = a.x + row * row_stride + head * a.head_stride + a.offset;
  const int half = a.half;
  const bool interleaved = a.pairing != RopePairing::halves;
  const float x0 = __bfloat162float(x[interleaved ? 2 * i : i]);
  const float x1 = __bfloat162float(x[interleaved ? 2 * i + 1 : i + half]);
  const float angle = a.inv_freq[i] * static_cast<float>(a.positions[row]);
  float s, c;
  sincosf(angle, &s, &c);
  c *= a.attention_factor;
  s *= a.attention_factor;
  const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
  __syncthreads();
  if (a.pairing == RopePairing::pairs) {
    x[2 * i] = __float2bfloat16(r0);
    x[2 * i + 1] = __float2bfloat16(r1);
  } else {
    x[i] = __float2bfloat16(r0);
    x[i + half] = __float2bfloat16(r1);
  }
}

}  // namespace

void rope(const RopeArgs& args, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(args.half >= 1 && args.half <= 256,
                   "rope: rotary half-dimension " + std::to_string(args.half) + " is outside [1, 256]");
  if (args.rows * args.heads == 0) return;
  launch_dependent(rope_kernel, dim3(static_cast<unsigned>(args.rows * args.heads)), dim3(args.half), 0, stream, args);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
