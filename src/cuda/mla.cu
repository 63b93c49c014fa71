// Multi-head latent attention's absorbed kv_b_proj products (model/mla_attention.cpp): the queries taken
// into the latent space through W_uk, and the attention's latent context back out through W_uv. A warp an
// output element, its lanes over the reduction, fp32 sums; both are small next to the projections.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"

namespace moe::cuda {

namespace {

constexpr int kMlaThreads = 256;

// Item (t, h, c): c < rank: Σ_n q[t, h, n] kv_b[h (nope + v) + n, c]; else q's rotary column c - rank.
__global__ void mla_absorb_kernel(const bf16* __restrict__ q, const bf16* __restrict__ kv_b, MlaDims d,
                                  int64_t T, bf16* __restrict__ out) {
  const int64_t dk = d.rank + d.rope, items = T * d.heads * dk;
  const int64_t item = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (item >= items) return;
  const int64_t c = item % dk, th = item / dk, h = th % d.heads;
  const bf16* qh = q + th * (d.nope + d.rope);
  if (c >= d.rank) {
    if (lane == 0) out[item] = qh[d.nope + c - d.rank];
    return;
  }
  const bf16* w = kv_b + h * (d.nope + d.v) * d.rank + c;
  float s = 0.0f;
  for (int64_t n = lane; n < d.nope; n += 32) s += __bfloat162float(qh[n]) * __bfloat162float(w[n * d.rank]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) out[item] = __float2bfloat16(s);
}

// Item (t, h, e): Σ_r context[t, h, r] kv_b[h (nope + v) + nope + e, r].
__global__ void mla_expand_kernel(const bf16* __restrict__ context, const bf16* __restrict__ kv_b, MlaDims d,
                                  int64_t T, bf16* __restrict__ out) {
  const int64_t items = T * d.heads * d.v;
  const int64_t item = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (item >= items) return;
  const int64_t e = item % d.v, th = item / d.v, h = th % d.heads;
  const bf16* ctx = context + th * d.rank;
  const bf16* w = kv_b + (h * (d.nope + d.v) + d.nope + e) * d.rank;
  float s = 0.0f;
  for (int64_t r = lane; r < d.rank; r += 32) s += __bfloat162float(ctx[r]) * __bfloat162float(w[r]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) out[item] = __float2bfloat16(s);
}

unsigned warps_grid(int64_t items) {
  constexpr int64_t kWarps = kMlaThreads / 32;
  return static_cast<unsigned>((items + kWarps - 1) / kWarps);
}

}  // namespace

void mla_absorb_queries(const bf16* q, const bf16* kv_b, const MlaDims& dims, int64_t T, bf16* out,
                        cudaStream_t stream) {
  const int64_t items = T * dims.heads * (dims.rank + dims.rope);
  if (items == 0) return;
  mla_absorb_kernel<<<warps_grid(items), kMlaThreads, 0, stream>>>(q, kv_b, dims, T, out);
  MOE_CUDA_CHECK_LAUNCH();
}

void mla_expand_context(const bf16* context, const bf16* kv_b, const MlaDims& dims, int64_t T, bf16* out,
                        cudaStream_t stream) {
  const int64_t items = T * dims.heads * dims.v;
  if (items == 0) return;
  mla_expand_kernel<<<warps_grid(items), kMlaThreads, 0, stream>>>(context, kv_b, dims, T, out);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
