// Router scores and top-k on the device: one warp per token after the gate GEMM (the selection itself is in
// router_select.cuh, shared with the fused decode kernel).
#include <cuda_bf16.h>

#include <cfloat>

#include "launch.h"
#include "core/knobs.h"
#include "router_select.cuh"
#include "cuda/check.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

// One warp per token over precomputed logits, first summing a row's parts (RouterGemm's terms) into its
// first part. Shared memory per warp: choice [E], score [E].
static __global__ void router_topk_kernel(RouterParams p, float* __restrict__ logits, int64_t stride, int parts,
                                          const float* __restrict__ bias, int64_t n_tokens,
                                          int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights) {
  extern __shared__ float shared[];
  const int warp = threadIdx.x / 32;
  const int64_t t = int64_t{blockIdx.x} * kWarpsPerBlock + warp;
  if (t >= n_tokens) return;
  float* const row = logits + t * stride;
  if (parts > 1) {
    // NOTE: kColumns columns a lane at once, so that all their loads are in flight together (a loop of one
    // column per lane waits for each round's loads in turn: 9.7 us at Qwen3 T=1024 on the H200).
    constexpr int kColumns = 8;
    const int64_t width = stride / parts;
    for (int64_t i0 = threadIdx.x % 32; i0 < width; i0 += 32 * kColumns) {
      float sum[kColumns];
#pragma unroll
      for (int c = 0; c < kColumns; ++c) sum[c] = i0 + 32 * c < width ? row[i0 + 32 * c] : 0.0f;
      for (int j = 1; j < parts; ++j) {
        float part[kColumns];
#pragma unroll
        for (int c = 0; c < kColumns; ++c) part[c] = i0 + 32 * c < width ? row[j * width + i0 + 32 * c] : 0.0f;
#pragma unroll
        for (int c = 0; c < kColumns; ++c) sum[c] += part[c];
      }
#pragma unroll
      for (int c = 0; c < kColumns; ++c)
        if (i0 + 32 * c < width) row[i0 + 32 * c] = sum[c];
    }
    __syncwarp();  // the warp's sums are visible to its lanes before the selection reads them
  }
  float* choice = shared + warp * 2 * p.n_experts;
  select_topk(p, row, bias, choice, choice + p.n_experts, topk_ids + t * p.top_k, topk_weights + t * p.top_k);
}

// Small batches: logits and top-k in one launch. Block (g, b + 1) computes the logits of gate rows
// [rows_per_block * b, rows_per_block * (b + 1)) for the tokens [8g, 8g + 8), the block's 8 warps split
// evenly over its rows and each row's H (fp32, x read as bf16): each gate chunk is loaded once for the
// block's 8 tokens and each x chunk once for its rows (through L1). The last block of a token group to
// finish (a counter per group, reset by that block, so graphs can replay) selects the group's top-k, a warp
// a token.
// NOTE: a block per token (the first version) read the gate T times from L2 and took 12 / 22 us at Qwen3
// T = 16 / 64 (ncu on the H200, 2026-11-30); up to T = 128 this kernel now also replaces RouterGemm
// for small gates (fused_router_takes).
constexpr int kTokensPerBlock = 8, kFusedWarps = 8, kFusedThreads = kFusedWarps * 32;
static_assert(kFusedWarps >= kTokensPerBlock, "one selecting warp per token of a group");

static __global__ void __launch_bounds__(kFusedThreads)
    router_fused_kernel(RouterParams p, const bf16* __restrict__ x, int64_t hidden, int64_t n_tokens,
                        const float* __restrict__ gate, int64_t gate_rows, int rows_per_block,
                        const float* __restrict__ bias, float* __restrict__ logits, unsigned* __restrict__ arrivals,
                        int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights) {
  extern __shared__ float shared[];  // per selecting warp: choice [E], score [E]
  __shared__ float partial[kFusedWarps][kTokensPerBlock];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // NOTE: the first row of blocks (dispatched first) only warms the selection's code. The selecting blocks
  // run it once per forward, after the previous forward's weight stream has evicted it from L2: stamped in
  // the graph, its cold run took 6.4 us against 2.0 us warm (Qwen3 T = 16, H200, 2026-11-30).
  // One warp selects from zeros at kernel entry, so that the code is in L2 when the selecting blocks get there.
  // Measured: -0.5 to -1.2 us at Qwen3 T = 16 and 64, neutral at 32 and 128 (2026-11-30): L2 is warmed, not
  // the selecting SM's own instruction cache, which no other block can warm.
  if (blockIdx.y == 0) {
    if (blockIdx.x == 0 && warp == 0) {
      __shared__ int32_t warm_ids[32];
      __shared__ float warm_weights[32];
      float* zeros = shared + 2 * p.n_experts;
      for (int e = lane; e < p.n_experts; e += 32) zeros[e] = 0.0f;
      __syncwarp();
      select_topk(p, zeros, bias, shared, shared + p.n_experts, warm_ids, warm_weights);
    }
    return;
  }
  const int64_t row_block = int64_t{blockIdx.y} - 1, row_blocks = int64_t{gridDim.y} - 1;
  wait_for_prior_grids();  // x may come from the previous kernel
  allow_dependent_launch();
  const int64_t t0 = int64_t{blockIdx.x} * kTokensPerBlock;
  const int tokens = static_cast<int>(min(int64_t{kTokensPerBlock}, n_tokens - t0));
  const int warps_per_row = kFusedWarps / rows_per_block;
  const int64_t row = row_block * rows_per_block + warp / warps_per_row;
  float sum[kTokensPerBlock] = {};
  if (row < gate_rows) {
    const bf16* xg = x + t0 * hidden;
    const float* g = gate + row * hidden;
#pragma unroll 2
    for (int64_t h = ((warp % warps_per_row) * 32 + lane) * 8; h < hidden; h += warps_per_row * 32 * 8) {
      const float4 g0 = *reinterpret_cast<const float4*>(g + h), g1 = *reinterpret_cast<const float4*>(g + h + 4);
      // NOTE: every token's x is loaded before any is used (predicated, no early exit): with a branch per
      // token the loads went out one L2 round trip at a time (21.5 us at Qwen3 T = 16).
      uint4 packed[kTokensPerBlock];
#pragma unroll
      for (int t = 0; t < kTokensPerBlock; ++t)
        packed[t] = t < tokens ? *reinterpret_cast<const uint4*>(xg + t * hidden + h) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int t = 0; t < kTokensPerBlock; ++t) {
        const auto* xv = reinterpret_cast<const __nv_bfloat162*>(&packed[t]);
        const float2 x0 = __bfloat1622float2(xv[0]), x1 = __bfloat1622float2(xv[1]);
        const float2 x2 = __bfloat1622float2(xv[2]), x3 = __bfloat1622float2(xv[3]);
        sum[t] += x0.x * g0.x + x0.y * g0.y + x1.x * g0.z + x1.y * g0.w + x2.x * g1.x + x2.y * g1.y +
                  x3.x * g1.z + x3.y * g1.w;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTokensPerBlock; ++t) {
    const float s = warp_sum(sum[t]);
    if (lane == 0) partial[warp][t] = s;
  }
  __syncthreads();
  if (threadIdx.x < rows_per_block * kTokensPerBlock) {
    const int local_row = threadIdx.x / kTokensPerBlock, t = threadIdx.x % kTokensPerBlock;
    const int64_t r = row_block * rows_per_block + local_row;
    float total = 0.0f;
    for (int w = 0; w < warps_per_row; ++w) total += partial[local_row * warps_per_row + w][t];
    if (r < gate_rows && t < tokens) logits[(t0 + t) * gate_rows + r] = total;
  }
  // NOTE: classic last-block pattern: publish the logits, then count arrivals; the last block sees all.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&arrivals[blockIdx.x], 1u) == row_blocks - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (warp < tokens) {
    const int64_t t = t0 + warp;
    float* choice = shared + warp * 2 * p.n_experts;
    select_topk(p, logits + t * gate_rows, bias, choice, choice + p.n_experts, topk_ids + t * p.top_k,
                topk_weights + t * p.top_k);
  }
  if (threadIdx.x == 0) arrivals[blockIdx.x] = 0;
}

static __global__ void f32_to_bf16_kernel(const float* __restrict__ x, bf16* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

int elementwise_blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 132 * 16)); }

}  // namespace

void router_topk(const routing::RouterConfig& c, float* logits, int64_t logits_stride, int logit_parts,
                 const float* correction_bias, int64_t n_tokens, int32_t* topk_ids, float* topk_weights,
                 cudaStream_t stream) {
  routing::validate(c);
  MOE_CUDA_REQUIRE(logit_parts >= 1 && logits_stride % logit_parts == 0 &&
                       logits_stride / logit_parts >= c.n_experts,
                   "router_topk: " + std::to_string(logit_parts) + " logit parts in rows of " +
                       std::to_string(logits_stride) + " for " + std::to_string(c.n_experts) + " experts");
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
  router_topk_kernel<<<blocks, kWarpsPerBlock * 32, shared_bytes, stream>>>(p, logits, logits_stride, logit_parts,
                                                                            correction_bias, n_tokens, topk_ids,
                                                                            topk_weights);
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
  // NOTE: large gates (Qwen3, DeepSeek-V3) take 2 rows a block (x read from L2 once per 2 rows, 4 warps a
  // row), small ones (Mixtral's 8 rows) one row a block over all 8 warps, so that more blocks share the
  // work. Measured on Qwen3 T = 16..128 (H200, 2026-11-30): 2 rows within 1 us of the best
  // of 1, 2, 4 and 8 at every T; 8 rows 7-11 us slower at T = 16 and 32.
  const int64_t forced_rows = knobs().router_rows_per_block.value_or(0);
  const int rows_per_block = forced_rows > 0 ? static_cast<int>(forced_rows) : gate_rows >= 64 ? 2 : 1;
  MOE_CUDA_REQUIRE(kFusedWarps % rows_per_block == 0, "the fused router's rows per block must divide 8");
  // One more row of blocks, before the gate's, warms the selection's code (see the kernel).
  const dim3 grid(static_cast<unsigned>((n_tokens + kTokensPerBlock - 1) / kTokensPerBlock),
                  static_cast<unsigned>((gate_rows + rows_per_block - 1) / rows_per_block + 1));
  // Per selecting warp choice [E] and score [E] (the warming warp also its zeros [E]): up to 64 KB.
  static_assert(kTokensPerBlock >= 2, "the warming warp's 3 E floats fit in the selecting warps' 2 E each");
  const size_t shared_bytes = size_t{kTokensPerBlock} * 2 * c.n_experts * sizeof(float);
  raise_shared_memory_once<router_fused_kernel>(size_t{kTokensPerBlock} * 2 * 1024 * sizeof(float));  // E <= 1024
  launch_dependent(router_fused_kernel, grid, dim3(kFusedThreads), shared_bytes, stream, p, x, hidden, n_tokens, gate,
                   gate_rows, rows_per_block, correction_bias, logits, arrivals, topk_ids, topk_weights);
}

void f32_to_bf16(const float* x, bf16* x_bf16, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, x_bf16, n);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
