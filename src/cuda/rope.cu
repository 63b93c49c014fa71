// Rotary position embeddings in place on bf16 heads, the angle in fp32 (inv_freq · position) and cos/sin
// scaled by the attention factor, as transformers 5.17 (and cpu/rope.cpp). A block a (row, head), a thread a
// rotary pair: every pair is read before any is written, since pairs_to_halves moves outputs across pairs.
#include <string>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/launch.h"
#include "cuda/rope_pair.cuh"

namespace moe::cuda {

namespace {

__global__ void rope_kernel(RopeArgs a) {
  allow_dependent_launch();
  wait_for_prior_grids();  // the inputs come from the kernel before
  const int64_t row = blockIdx.x / a.heads, head = blockIdx.x % a.heads;
  const int i = threadIdx.x;
  const int64_t row_stride = a.row_stride > 0 ? a.row_stride : a.heads * a.head_stride;
  bf16* x = a.x + row * row_stride + head * a.head_stride + a.offset;
  const RopePair pair = rope_pair(a.pairing, i, a.half);
  const float2 r = rope_rotate(__bfloat162float(x[pair.in0]), __bfloat162float(x[pair.in1]), a.inv_freq[i],
                               a.positions[row], a.attention_factor);
  __syncthreads();
  x[pair.out0] = __float2bfloat16(r.x);
  x[pair.out1] = __float2bfloat16(r.y);
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
