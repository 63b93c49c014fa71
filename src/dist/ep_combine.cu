// Combine at the source, one block per token: the partial sums its copies brought back, added in ascending
// rank order (deterministic: no atomics), then the shared experts as in cuda::unpermute.
#include <cuda_bf16.h>

#include "ep_kernels.h"
#include "moe/cuda/check.h"

namespace moe::dist::kernels {

namespace {

constexpr int kVec = 8;  // bf16 values per 16-byte load

__global__ void combine_kernel(const bf16* __restrict__ back, const int32_t* __restrict__ copy_of, int n_ranks,
                               int64_t n_tokens, int64_t hidden, const bf16* __restrict__ shared,
                               const float* __restrict__ gate_logit, int64_t gate_stride, float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  __shared__ int32_t copies[kMaxRanks];
  if (threadIdx.x < n_ranks) copies[threadIdx.x] = copy_of[threadIdx.x * n_tokens + t];
  __syncthreads();
  const float shared_scale = gate_logit ? 1.0f / (1.0f + __expf(-gate_logit[t * gate_stride])) : 1.0f;
  for (int64_t h0 = threadIdx.x * int64_t{kVec}; h0 < hidden; h0 += int64_t{blockDim.x} * kVec) {
    float sum[kVec] = {};
    for (int r = 0; r < n_ranks; ++r) {
      if (copies[r] < 0) continue;
      const uint4 packed = *reinterpret_cast<const uint4*>(back + int64_t{copies[r]} * hidden + h0);
      const auto* v = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
      for (int i = 0; i < kVec / 2; ++i) {
        const float2 f = __bfloat1622float2(v[i]);
        sum[2 * i] += f.x;
        sum[2 * i + 1] += f.y;
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

void ep_combine(const bf16* back, const int32_t* copy_of, int n_ranks, int64_t n_tokens, int64_t hidden,
                const bf16* shared, const float* shared_gate_logit, int64_t shared_gate_stride, float* out,
                cudaStream_t stream) {
  MOE_CUDA_REQUIRE(hidden % kVec == 0 && n_ranks <= kMaxRanks, "ep_combine: hidden must be a multiple of 8");
  if (n_tokens == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(64, hidden / kVec)));
  combine_kernel<<<static_cast<unsigned>(n_tokens), threads, 0, stream>>>(back, copy_of, n_ranks, n_tokens, hidden,
                                                                          shared, shared_gate_logit,
                                                                          shared_gate_stride, out);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::dist::kernels
