// Packing a token's copies for dispatch, one block per token: the row is read once and written to every
// destination rank's slot in the send buffer, bf16 as it is, or fp8 e4m3 with one fp32 scale per 128
// values (the MPI path's format, src/ep/transfer.cpp: scale = amax / 448, values divided by it and
// clamped to +-448, rounded to nearest even; an all-zero block keeps scale 1).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "ep_kernels.h"
#include "cuda/check.h"

namespace moe::ep::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kFp8Block = 128;  // values per scale (ep::kFp8Block)
constexpr float kFp8Max = 448.0f;

__global__ void __launch_bounds__(kThreads)
    pack_kernel(const bf16* __restrict__ x, const float* __restrict__ topk_weights,
                const int32_t* __restrict__ pair_rank, const int32_t* __restrict__ pair_slot,
                const int32_t* __restrict__ copy_pos, const int64_t* __restrict__ send_copies, int64_t n_tokens,
                int top_k, int n_ranks, int64_t hidden, bool fp8, int64_t row_bytes, uint8_t* __restrict__ send_rows,
                WirePair* __restrict__ send_pairs, int32_t* __restrict__ copy_of) {
  const int64_t t = blockIdx.x;
  __shared__ int64_t copy[kMaxRanks];   // this token's copy index per rank, -1: none
  __shared__ int32_t used[kMaxRanks];   // this token's pairs per rank
  if (threadIdx.x == 0) {
    int64_t displ = 0;  // the groups' offsets: exclusive scan of send_copies (R is small)
    for (int r = 0; r < n_ranks; ++r) {
      const int32_t pos = copy_pos[r * n_tokens + t];
      copy[r] = pos < 0 ? -1 : displ + pos;
      copy_of[r * n_tokens + t] = pos < 0 ? -1 : static_cast<int32_t>(displ + pos);
      used[r] = 0;
      displ += send_copies[r];
    }
    for (int j = 0; j < top_k; ++j) ++used[pair_rank[t * top_k + j]];
  }
  __syncthreads();

  // Pairs: pair j goes to position (pairs of its rank before j) of its copy; the rest of each copy is unused.
  if (threadIdx.x < top_k) {
    const int j = threadIdx.x, r = pair_rank[t * top_k + j];
    int position = 0;
    for (int i = 0; i < j; ++i) position += pair_rank[t * top_k + i] == r;
    send_pairs[copy[r] * top_k + position] = {pair_slot[t * top_k + j], topk_weights[t * top_k + j]};
    for (int rr = 0; rr < n_ranks; ++rr)
      if (copy[rr] >= 0 && j >= used[rr]) send_pairs[copy[rr] * top_k + j] = {-1, 0.0f};
  }

  const bf16* row = x + t * hidden;
  if (!fp8) {
    for (int64_t h = threadIdx.x * int64_t{8}; h < hidden; h += kThreads * 8) {
      const uint4 v = *reinterpret_cast<const uint4*>(row + h);
      for (int r = 0; r < n_ranks; ++r)
        if (copy[r] >= 0) *reinterpret_cast<uint4*>(send_rows + copy[r] * row_bytes + 2 * h) = v;
    }
    return;
  }
  // fp8: one warp per block of 128 values, 4 values a lane.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n_blocks = (hidden + kFp8Block - 1) / kFp8Block;
  for (int64_t b = warp; b < n_blocks; b += kThreads / 32) {
    const int64_t h = b * kFp8Block + lane * 4;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const bool valid = h < hidden;  // hidden is a multiple of 64: a lane's 4 values are all in or all out
    if (valid) {
      const uint2 packed = *reinterpret_cast<const uint2*>(row + h);
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.x));
      const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.y));
      v[0] = a.x, v[1] = a.y, v[2] = c.x, v[3] = c.y;
    }
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = amax > 0.0f ? amax / kFp8Max : 1.0f;
    uint32_t bytes = 0;
    for (int i = 0; i < 4; ++i) {
      const float q = fminf(fmaxf(v[i] / scale, -kFp8Max), kFp8Max);
      bytes |= uint32_t{__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3)} << (8 * i);
    }
    for (int r = 0; r < n_ranks; ++r) {
      if (copy[r] < 0) continue;
      uint8_t* dst = send_rows + copy[r] * row_bytes;
      if (valid) *reinterpret_cast<uint32_t*>(dst + h) = bytes;
      if (lane == 0) *reinterpret_cast<float*>(dst + hidden + 4 * b) = scale;
    }
  }
}

}  // namespace

void ep_pack(const bf16* x, const float* topk_weights, const int32_t* pair_rank, const int32_t* pair_slot,
             const int32_t* copy_pos, const int64_t* send_copies, int64_t n_tokens, int top_k, int n_ranks,
             int64_t hidden, bool fp8, int64_t row_bytes, uint8_t* send_rows, WirePair* send_pairs, int32_t* copy_of,
             cudaStream_t stream) {
  MOE_CUDA_REQUIRE(top_k <= kThreads && n_ranks <= kMaxRanks, "ep_pack: k or the rank count is too large");
  MOE_CUDA_REQUIRE(hidden % 64 == 0, "ep_pack needs a hidden size that is a multiple of 64, got " +
                                         std::to_string(hidden));
  if (n_tokens == 0) return;
  pack_kernel<<<static_cast<unsigned>(n_tokens), kThreads, 0, stream>>>(
      x, topk_weights, pair_rank, pair_slot, copy_pos, send_copies, n_tokens, top_k, n_ranks, hidden, fp8, row_bytes,
      send_rows, send_pairs, copy_of);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::ep::kernels
