// q/k head norms, RoPE and the cache write as one kernel (a decode step's five small launches were ~13 µs
// of a Qwen3 layer's ~96 under ncu on the H200). A block a (row, head): the first `heads` heads of a row are
// q's, the next kv_heads k's, which also carry v's head of the same index to the value pool. A thread holds
// one rotary pair, read before any is written (pairs_to_halves moves outputs across pairs).
#include <string>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/launch.h"
#include "cuda/rope_pair.cuh"

namespace moe::cuda {

namespace {

__global__ void attention_inputs_kernel(AttentionInputsArgs a) {
  __shared__ float partial[8];
  allow_dependent_launch();
  wait_for_prior_grids();  // q, k and v come from the projection before
  const int64_t heads = a.heads + a.kv_heads, row = blockIdx.x / heads, head = blockIdx.x % heads;
  const bool is_q = head < a.heads;
  const int64_t kv_head = head - a.heads;
  bf16* x = is_q ? a.q + row * a.q_row + head * a.head_dim : a.k + row * a.k_row + kv_head * a.head_dim;
  const float* norm = is_q ? a.q_norm : a.k_norm;
  const int i = threadIdx.x, half = a.half;
  const bool active = i < half;  // the block is rounded up to whole warps
  const RopePair pair = rope_pair(a.pairing, i, half);
  float x0 = active ? __bfloat162float(x[pair.in0]) : 0.0f, x1 = active ? __bfloat162float(x[pair.in1]) : 0.0f;
  if (norm) {
    float squares = x0 * x0 + x1 * x1;
    for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = squares;
    __syncthreads();
    squares = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) squares += partial[w];
    const float inv = rsqrtf(squares / static_cast<float>(a.head_dim) + a.eps);
    if (active) {
      x0 = __bfloat162float(__float2bfloat16(x0 * inv * norm[pair.in0]));
      x1 = __bfloat162float(__float2bfloat16(x1 * inv * norm[pair.in1]));
    }
  }
  __syncthreads();
  if (!active) return;
  const float2 r = rope_rotate(x0, x1, a.inv_freq[i], a.positions[row], a.attention_factor);
  const bf16 r0 = __float2bfloat16(r.x), r1 = __float2bfloat16(r.y);
  x[pair.out0] = r0;
  x[pair.out1] = r1;
  const int32_t slot = a.slots[row];
  if (is_q || slot < 0) return;  // q's head, or a padding row of a recorded step
  const int64_t width = a.kv_heads * a.head_dim, at = int64_t{slot} * width + kv_head * a.head_dim;
  a.key_pool[at + pair.out0] = __bfloat162float(r0);
  a.key_pool[at + pair.out1] = __bfloat162float(r1);
  const bf16* v = a.v + row * a.v_row + kv_head * a.head_dim;
  a.value_pool[at + i] = __bfloat162float(v[i]);
  a.value_pool[at + i + half] = __bfloat162float(v[i + half]);
}

}  // namespace

void attention_inputs(const AttentionInputsArgs& args, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(args.half >= 1 && args.half <= 256 && args.head_dim == 2 * args.half,
                   "attention_inputs: head_dim " + std::to_string(args.head_dim) + " is not twice the rotary half " +
                       std::to_string(args.half) + " (at most 256)");
  if (args.rows == 0) return;
  const unsigned threads = static_cast<unsigned>((args.half + 31) / 32 * 32);
  launch_dependent(attention_inputs_kernel, dim3(static_cast<unsigned>(args.rows * (args.heads + args.kv_heads))),
                   dim3(threads), 0, stream, args);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
