// Unpermute on the device: each token gathers its k expert rows and sums them with their weights, in pair
// order (deterministic: no atomics), then adds the shared experts' output, gated or not.
#include <cuda_bf16.h>

#include "launch.h"
#include "cuda/check.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kMaxTopK = 32;
constexpr int kVec = 8;  // bf16 values per 16-byte load

static __global__ void unpermute_kernel(const bf16* __restrict__ rows, const int32_t* __restrict__ pair_rows,
                                        const float* __restrict__ pair_weights, int top_k, int64_t hidden,
                                        const bf16* __restrict__ shared, const float* __restrict__ gate_logit,
                                        int64_t gate_stride, float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  __shared__ int32_t row_of[kMaxTopK];
  __shared__ float weight_of[kMaxTopK];
  wait_for_prior_grids();
  allow_dependent_launch();
  if (threadIdx.x < top_k) {
    row_of[threadIdx.x] = pair_rows[t * top_k + threadIdx.x];
    weight_of[threadIdx.x] = pair_weights[t * top_k + threadIdx.x];
  }
  __syncthreads();
  const float shared_scale = gate_logit ? 1.0f / (1.0f + __expf(-gate_logit[t * gate_stride])) : 1.0f;
  for (int64_t h0 = threadIdx.x * int64_t{kVec}; h0 < hidden; h0 += int64_t{blockDim.x} * kVec) {
    float sum[kVec] = {};
    // NOTE: the rows of a batch of pairs are loaded before any is used, so their latencies overlap; the
    // sum still runs in pair order.
    constexpr int kBatch = 8;
    for (int j0 = 0; j0 < top_k; j0 += kBatch) {
      uint4 packed[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = j0 + b;
        packed[b] = j < top_k && row_of[j] >= 0
                        ? *reinterpret_cast<const uint4*>(rows + int64_t{row_of[j]} * hidden + h0)
                        : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = j0 + b;
        if (j >= top_k || row_of[j] < 0) continue;  // past k, or dropped by the capacity limit
        const auto* v = reinterpret_cast<const __nv_bfloat162*>(&packed[b]);
#pragma unroll
        for (int i = 0; i < kVec / 2; ++i) {
          const float2 f = __bfloat1622float2(v[i]);
          sum[2 * i] += weight_of[j] * f.x;
          sum[2 * i + 1] += weight_of[j] * f.y;
        }
      }
    }
    if (shared) {
      const uint4 packed = *reinterpret_cast<const uint4*>(shared + t * hidden + h0);
      const auto* v = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
      for (int i = 0; i < kVec / 2; ++i) {
        const float2 f = __bfloat1622float2(v[i]);
        sum[2 * i] += shared_scale * f.x;
        sum[2 * i + 1] += shared_scale * f.y;
      }
    }
    float4* dst = reinterpret_cast<float4*>(out + t * hidden + h0);
    dst[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
    dst[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
  }
}

}  // namespace

void unpermute(const bf16* rows, const int32_t* pair_rows, const float* pair_weights, int64_t n_tokens, int top_k,
               int64_t hidden, const bf16* shared, const float* shared_gate_logit, int64_t shared_gate_stride,
               float* out, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(top_k <= kMaxTopK, "unpermute handles k <= 32, got " + std::to_string(top_k));
  MOE_CUDA_REQUIRE(hidden % kVec == 0, "unpermute needs a hidden size that is a multiple of 8, got " +
                                           std::to_string(hidden));
  if (n_tokens == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, hidden / kVec)));
  launch_dependent(unpermute_kernel, dim3(static_cast<unsigned>(n_tokens)), dim3(threads), 0, stream, rows, pair_rows,
                   pair_weights, top_k, hidden, shared, shared_gate_logit, shared_gate_stride, out);
}

}  // namespace moe::cuda
