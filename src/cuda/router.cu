// Router scores and top-k on the device: one warp per token after the gate GEMM (the selection itself is in
// router_select.cuh, shared with the fused decode kernel).
#include <cuda_bf16.h>

#include <cfloat>

#include "launch.h"
#include "router_select.cuh"
#include "moe/cuda/check.h"
#include "moe/cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

// One warp per token over precomputed logits. Shared memory per warp: choice [E], score [E].
static __global__ void router_topk_kernel(RouterParams p, const float* __restrict__ logits, int64_t stride,
                                          const float* __restrict__ bias, int64_t n_tokens,
                                          int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights) {
  extern __shared__ float shared[];
  const int warp = threadIdx.x / 32;
  const int64_t t = int64_t{blockIdx.x} * kWarpsPerBlock + warp;
  if (t >= n_tokens) return;
  float* choice = shared + warp * 2 * p.n_experts;
  select_topk(p, logits + t * stride, bias, choice, choice + p.n_experts, topk_ids + t * p.top_k,
              topk_weights + t * p.top_k);
}

// Decode: logits and top-k in one launch. Block (t, b) computes the logits of gate rows [2b, 2b + 2) for
// token t, four warps a row (fp32, x read as bf16), so that a small gate is still read by many blocks;
// the last block of a token to finish (a counter per token, reset by that block, so graphs can replay)
// selects the top-k.
constexpr int kRowsPerBlock = 2, kWarpsPerRow = 4;

static __global__ void __launch_bounds__(kRowsPerBlock * kWarpsPerRow * 32)
    router_fused_kernel(RouterParams p, const bf16* __restrict__ x, int64_t hidden, const float* __restrict__ gate,
                        int64_t gate_rows, const float* __restrict__ bias, float* __restrict__ logits,
                        unsigned* __restrict__ arrivals, int32_t* __restrict__ topk_ids,
                        float* __restrict__ topk_weights) {
  extern __shared__ float shared[];  // choice [E], score [E] for the selecting warp
  __shared__ float partial[kRowsPerBlock * kWarpsPerRow];
  wait_for_prior_grids();  // x may come from the previous kernel
  allow_dependent_launch();
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t{blockIdx.y} * kRowsPerBlock + warp / kWarpsPerRow;
  float sum = 0.0f;
  if (row < gate_rows) {
    const bf16* xt = x + t * hidden;
    const float* g = gate + row * hidden;
    for (int64_t h = ((warp % kWarpsPerRow) * 32 + lane) * 8; h < hidden; h += kWarpsPerRow * 32 * 8) {
      const uint4 packed = *reinterpret_cast<const uint4*>(xt + h);  // 8 bf16 of x, 8 floats of the gate
      const auto* xv = reinterpret_cast<const __nv_bfloat162*>(&packed);
      const float4 g0 = *reinterpret_cast<const float4*>(g + h), g1 = *reinterpret_cast<const float4*>(g + h + 4);
      const float2 x0 = __bfloat1622float2(xv[0]), x1 = __bfloat1622float2(xv[1]);
      const float2 x2 = __bfloat1622float2(xv[2]), x3 = __bfloat1622float2(xv[3]);
      sum += x0.x * g0.x + x0.y * g0.y + x1.x * g0.z + x1.y * g0.w + x2.x * g1.x + x2.y * g1.y + x3.x * g1.z +
             x3.y * g1.w;
    }
  }
  sum = warp_sum(sum);
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  if (threadIdx.x < kRowsPerBlock) {
    const int64_t r = int64_t{blockIdx.y} * kRowsPerBlock + threadIdx.x;
    float total = 0.0f;
    for (int w = 0; w < kWarpsPerRow; ++w) total += partial[threadIdx.x * kWarpsPerRow + w];
    if (r < gate_rows) logits[t * gate_rows + r] = total;
  }
  // NOTE: classic last-block pattern: publish the logits, then count arrivals; the last block sees all.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&arrivals[t], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (warp == 0) {
    const float* lt = logits + t * gate_rows;
    select_topk(p, lt, bias, shared, shared + p.n_experts, topk_ids + t * p.top_k, topk_weights + t * p.top_k);
    if (lane == 0) arrivals[t] = 0;
  }
}

static __global__ void f32_to_bf16_kernel(const float* __restrict__ x, bf16* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

int elementwise_blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 132 * 16)); }

}  // namespace

void router_topk(const routing::RouterConfig& c, const float* logits, int64_t logits_stride,
                 const float* correction_bias, int64_t n_tokens, int32_t* topk_ids, float* topk_weights,
                 cudaStream_t stream) {
  routing::validate(c);
  MOE_CUDA_REQUIRE(c.n_experts <= 1024 && c.top_k <= 32 && c.n_group <= 32,
                   "the CUDA router handles up to 1024 experts, k <= 32 and 32 groups (got " +
                       std::to_string(c.n_experts) + ", " + std::to_string(c.top_k) + ", " +
                       std::to_string(c.n_group) + ")");
  if (n_tokens == 0) return;
  const RouterParams p{.method = c.method, .n_experts = c.n_experts, .top_k = c.top_k, .n_group = c.n_group,
                       .topk_group = c.topk_group, .norm_topk_prob = c.norm_topk_prob,
                       .routed_scaling_factor = c.routed_scaling_factor};
  const int blocks = static_cast<int>((n_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const size_t shared_bytes = size_t{kWarpsPerBlock} * 2 * c.n_experts * sizeof(float);
  router_topk_kernel<<<blocks, kWarpsPerBlock * 32, shared_bytes, stream>>>(p, logits, logits_stride, correction_bias,
                                                                            n_tokens, topk_ids, topk_weights);
  MOE_CUDA_CHECK_LAUNCH();
}

void router_fused(const routing::RouterConfig& c, const bf16* x, int64_t hidden, const float* gate, int64_t gate_rows,
                  const float* correction_bias, int64_t n_tokens, float* logits, unsigned* arrivals,
                  int32_t* topk_ids, float* topk_weights, cudaStream_t stream) {
  routing::validate(c);
  MOE_CUDA_REQUIRE(c.n_experts <= 1024 && c.top_k <= 32 && c.n_group <= 32 && hidden % 8 == 0,
                   "the fused CUDA router handles up to 1024 experts, k <= 32, 32 groups and hidden sizes that "
                   "are multiples of 8");
  if (n_tokens == 0) return;
  const RouterParams p{.method = c.method, .n_experts = c.n_experts, .top_k = c.top_k, .n_group = c.n_group,
                       .topk_group = c.topk_group, .norm_topk_prob = c.norm_topk_prob,
                       .routed_scaling_factor = c.routed_scaling_factor};
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>((gate_rows + kRowsPerBlock - 1) / kRowsPerBlock));
  launch_dependent(router_fused_kernel, grid, dim3(kRowsPerBlock * kWarpsPerRow * 32), 2 * c.n_experts * sizeof(float),
                   stream, p, x, hidden, gate, gate_rows, correction_bias, logits, arrivals, topk_ids, topk_weights);
}

void f32_to_bf16(const float* x, bf16* x_bf16, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, x_bf16, n);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
