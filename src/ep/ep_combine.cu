// Combine at the source, one block per token: the partial sums its copies brought back (bf16 or fp32, the
// combine wire), added in ascending rank order (deterministic: no atomics), then the shared experts as in
// cuda::unpermute.
#include <cuda_bf16.h>

#include "ep_kernels.h"
#include "cuda/check.h"

namespace moe::ep::kernels {

namespace {

constexpr int kVec = 8;  // values per thread and step: one 16-byte bf16 load

// The kVec values of `row` from h0 on, as fp32.
__device__ inline void load_values(const bf16* row, int64_t h0, float (&v)[kVec]) {
  const uint4 packed = *reinterpret_cast<const uint4*>(row + h0);
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
__device__ inline void load_values(const float* row, int64_t h0, float (&v)[kVec]) {
  const float4 a = *reinterpret_cast<const float4*>(row + h0);
  const float4 b = *reinterpret_cast<const float4*>(row + h0 + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <typename Partial>
__global__ void combine_kernel(const Partial* __restrict__ back, const int32_t* __restrict__ copy_of, int n_ranks,
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
      float v[kVec];
      load_values(back + int64_t{copies[r]} * hidden, h0, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) sum[i] += v[i];
    }
    if (shared) {
      float v[kVec];
      load_values(shared + t * hidden, h0, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) sum[i] += shared_scale * v[i];
    }
    float4* dst = reinterpret_cast<float4*>(out + t * hidden + h0);
    dst[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
    dst[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
  }
}

template <typename Partial>
void launch_combine(const Partial* back, const int32_t* copy_of, int n_ranks, int64_t n_tokens, int64_t hidden,
                    const bf16* shared, const float* shared_gate_logit, int64_t shared_gate_stride, float* out,
                    cudaStream_t stream) {
  MOE_CUDA_REQUIRE(hidden % kVec == 0, "ep_combine: hidden must be a multiple of 8, got " + std::to_string(hidden));
  MOE_CUDA_REQUIRE(n_ranks <= kMaxRanks, "ep_combine: at most " + std::to_string(kMaxRanks) + " ranks, got " +
                                             std::to_string(n_ranks));
  if (n_tokens == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(64, hidden / kVec)));
  combine_kernel<<<static_cast<unsigned>(n_tokens), threads, 0, stream>>>(back, copy_of, n_ranks, n_tokens, hidden,
                                                                          shared, shared_gate_logit,
                                                                          shared_gate_stride, out);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void ep_combine(const bf16* back, const int32_t* copy_of, int n_ranks, int64_t n_tokens, int64_t hidden,
                const bf16* shared, const float* shared_gate_logit, int64_t shared_gate_stride, float* out,
                cudaStream_t stream) {
  launch_combine(back, copy_of, n_ranks, n_tokens, hidden, shared, shared_gate_logit, shared_gate_stride, out, stream);
}

void ep_combine(const float* back, const int32_t* copy_of, int n_ranks, int64_t n_tokens, int64_t hidden,
                const bf16* shared, const float* shared_gate_logit, int64_t shared_gate_stride, float* out,
                cudaStream_t stream) {
  launch_combine(back, copy_of, n_ranks, n_tokens, hidden, shared, shared_gate_logit, shared_gate_stride, out, stream);
}

}  // namespace moe::ep::kernels
