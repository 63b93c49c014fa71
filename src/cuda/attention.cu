// Paged attention over the fp32 KV pools: the cache write of a batch's new rows, and causal attention of
// each query row against its sequence's blocks. A block a (row, query head); its warps take every
// kAttentionWarps-th run of kKeysAtOnce keys, each with an fp32 online softmax (running max, sum and
// weighted values over its lanes' value columns), merged at the end: the decode kernel (a prefill of more
// than kPrefillAttentionRows rows a sequence goes to the tiled kernel of prefill_attention.cu); decode reads
// each key once per query head of its group.
#include <string>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/launch.h"

namespace moe::cuda {

namespace {

// NOTE: 16 warps, so that a long sequence's keys are spread over 16 online softmaxes.
constexpr int kAttentionWarps = 16;
constexpr int kMaxDk = 1024, kMaxDv = 512;
constexpr int kKeysAtOnce = 4;

__global__ void append_kv_kernel(const bf16* __restrict__ rows, int64_t width, int64_t row_stride,
                                 const int32_t* __restrict__ slot, float* __restrict__ pool) {
  const int64_t row = blockIdx.x;
  allow_dependent_launch();
  wait_for_prior_grids();  // the inputs come from the kernel before
  if (slot[row] < 0) return;  // a padding row of a recorded step
  float* dst = pool + int64_t{slot[row]} * width;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
    dst[c] = __bfloat162float(rows[row * row_stride + c]);
}

// VALUES_PER_LANE: the value columns each lane accumulates (dv <= 32 · VALUES_PER_LANE).
template <int VALUES_PER_LANE>
__global__ void __launch_bounds__(32 * kAttentionWarps) paged_attention_kernel(PagedAttentionArgs a) {
  __shared__ float q[kMaxDk];
  __shared__ float warp_max[kAttentionWarps], warp_sum[kAttentionWarps];
  __shared__ float warp_acc[kAttentionWarps][kMaxDv];
  const int64_t row = blockIdx.x / a.heads, head = blockIdx.x % a.heads;
  const int64_t kv_head = head / (a.heads / a.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  allow_dependent_launch();
  wait_for_prior_grids();  // the inputs come from the kernel before
  const int64_t q_row = a.q_row > 0 ? a.q_row : a.heads * a.dk;
  for (int64_t d = threadIdx.x; d < a.dk; d += blockDim.x)
    q[d] = __bfloat162float(a.q[row * q_row + head * a.dk + d]) * a.scale;
  __syncthreads();

  const int32_t* table = a.block_tables + a.row_table[row];
  const int64_t visible = a.row_visible[row], key_row = a.kv_heads * a.dk, value_row = a.kv_heads * a.dv;
  float running_max = -INFINITY, sum = 0.0f, acc[VALUES_PER_LANE];
#pragma unroll
  for (int i = 0; i < VALUES_PER_LANE; ++i) acc[i] = 0.0f;
  // NOTE: a warp takes kKeysAtOnce keys a round, their loads independent: one L2/DRAM latency a round
  // instead of one a key (a 128-key decode row: 12.9 µs with a key a round on the H200).
  for (int64_t j0 = int64_t{warp} * kKeysAtOnce; j0 < visible; j0 += kAttentionWarps * kKeysAtOnce) {
    const float* k[kKeysAtOnce];
    const float* v[kKeysAtOnce];
    float score[kKeysAtOnce];
#pragma unroll
    for (int u = 0; u < kKeysAtOnce; ++u) {
      const int64_t j = j0 + u < visible ? j0 + u : j0;  // a key past the end repeats the first, weighs 0
      const int64_t slot = int64_t{table[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens;
      k[u] = a.keys + slot * key_row + kv_head * a.dk;
      v[u] = a.values + slot * value_row + kv_head * a.dv;
      score[u] = 0.0f;
    }
#pragma unroll 4
    for (int64_t d = lane; d < a.dk; d += 32) {
      const float qd = q[d];
#pragma unroll
      for (int u = 0; u < kKeysAtOnce; ++u) score[u] += qd * k[u][d];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int u = 0; u < kKeysAtOnce; ++u) score[u] += __shfl_xor_sync(0xffffffffu, score[u], o);
    float round_max = score[0];
#pragma unroll
    for (int u = 1; u < kKeysAtOnce; ++u)
      if (j0 + u < visible) round_max = fmaxf(round_max, score[u]);
    const float new_max = fmaxf(running_max, round_max), correction = __expf(running_max - new_max);
    float p[kKeysAtOnce];
#pragma unroll
    for (int u = 0; u < kKeysAtOnce; ++u) {
      p[u] = j0 + u < visible ? __expf(score[u] - new_max) : 0.0f;
      sum = (u == 0 ? sum * correction : sum) + p[u];
    }
    running_max = new_max;
#pragma unroll
    for (int i = 0; i < VALUES_PER_LANE; ++i) {
      const int64_t d = lane + 32 * i;
      float weighted = 0.0f;
      if (d < a.dv)
#pragma unroll
        for (int u = 0; u < kKeysAtOnce; ++u) weighted += p[u] * v[u][d];
      acc[i] = acc[i] * correction + weighted;
    }
  }
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = sum;
  }
#pragma unroll
  for (int i = 0; i < VALUES_PER_LANE; ++i)
    if (lane + 32 * i < a.dv) warp_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();

  float total_max = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) total_max = fmaxf(total_max, warp_max[w]);
  float total = 0.0f, weight[kAttentionWarps];
  for (int w = 0; w < kAttentionWarps; ++w) {
    // NOTE: a warp that saw no key (visible < kAttentionWarps) has max -inf and weighs 0.
    weight[w] = warp_max[w] == -INFINITY ? 0.0f : __expf(warp_max[w] - total_max);
    total += warp_sum[w] * weight[w];
  }
  for (int64_t d = threadIdx.x; d < a.dv; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w) o += warp_acc[w][d] * weight[w];
    a.out[(row * a.heads + head) * a.dv + d] = __float2bfloat16(o / total);
  }
}

}  // namespace

void append_kv(const bf16* rows, int64_t n, int64_t width, int64_t row_stride, const int32_t* slot,
               float* pool, cudaStream_t stream) {
  if (n == 0) return;
  launch_dependent(append_kv_kernel, dim3(static_cast<unsigned>(n)), dim3(128), 0, stream, rows, width, row_stride, slot,
                   pool);
  MOE_CUDA_CHECK_LAUNCH();
}

void paged_attention(const PagedAttentionArgs& args, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(args.dk >= 1 && args.dk <= kMaxDk && args.dv >= 1 && args.dv <= kMaxDv,
                   "paged_attention: head sizes dk " + std::to_string(args.dk) + ", dv " +
                       std::to_string(args.dv) + " outside the kernel's limits (dk <= 1024, dv <= 512)");
  MOE_CUDA_REQUIRE(args.kv_heads >= 1 && args.heads % args.kv_heads == 0,
                   "paged_attention: " + std::to_string(args.heads) + " query heads are not a multiple of " +
                       std::to_string(args.kv_heads) + " KV heads");
  if (args.rows * args.heads == 0) return;
  if (args.max_sequence_rows > kPrefillAttentionRows && prefill_attention_fits(args)) {
    prefill_attention(args, stream);
    return;
  }
  const dim3 blocks(static_cast<unsigned>(args.rows * args.heads)), threads(32 * kAttentionWarps);
  if (args.dv <= 128)
    launch_dependent(paged_attention_kernel<4>, blocks, threads, 0, stream, args);
  else if (args.dv <= 256)
    launch_dependent(paged_attention_kernel<8>, blocks, threads, 0, stream, args);
  else
    launch_dependent(paged_attention_kernel<16>, blocks, threads, 0, stream, args);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
