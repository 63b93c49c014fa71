// Gathers the rows of x into expert order for GEMMs that take contiguous rows (the wgmma kernel's TMA
// loads): a warp a row, many 16-byte loads in flight per lane, evict-first stores.
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "launch.h"
#include "cuda/check.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

// 16-byte chunks each lane of copy_rows_kernel loads before it stores any: the loads of one row are
// independent, and DRAM (or L2) latency is hidden only with many in flight.
constexpr int kGatherChunksPerLane = 8;

// Copies rows of x into the gathered rows, a warp a row (an item), in one of two orders:
//   by row (BY_PAIR false, gather_rows): item r is row r, out[r] = x[index[r]], zeros where index[r] < 0;
//   by pair (BY_PAIR true, gather_pair_rows): item p is pair p, out[index[p]] = x[p / top_k], nothing where
//   index[p] < 0. The k pairs of a token are neighbouring items, which neighbouring warps copy at about the
//   same time, so that x comes from DRAM about once even where it does not fit in L2.
// NOTE: in row (expert) order each of a token's k reads is far from the others: at DeepSeek-V3 T=8192
// (x 117 MB) the row order read 0.76 GB from DRAM besides the 0.94 GB written, 440 us; the pair order reads
// 0.12 GB, 291 us (Qwen3 T=8192: 108 -> 84 us; ncu on the H200, 2026-12-01).
// The stores are evict-first, so that x stays in L2 while the rows stream out.
// NOTE: at Qwen3 T=8192 (268 MB of rows from a 34 MB x) the plain stores evicted x: 160 MB of DRAM reads
// besides the 242 MB written, 110 us (H200, 2026-11-30).
template <bool BY_PAIR>
static __global__ void copy_rows_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ index,
                                        int top_k, int64_t n_items, int64_t chunks_per_row,
                                        bf16* __restrict__ out) {
  wait_for_prior_grids();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  int64_t i = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  int32_t indexed = i < n_items ? index[i] : -1;
  for (; i < n_items; i += warps) {
    // The next item's index is read before this item's loads so that its latency overlaps them.
    const int32_t next_indexed = i + warps < n_items ? index[i + warps] : -1;
    const int64_t token = BY_PAIR ? i / top_k : indexed, row = BY_PAIR ? indexed : i;
    if (!BY_PAIR || row >= 0) {  // uniform over the warp
      const uint4* src = reinterpret_cast<const uint4*>(x + (token < 0 ? 0 : token) * chunks_per_row * 8);
      uint4* dst = reinterpret_cast<uint4*>(out + row * chunks_per_row * 8);
      for (int64_t c0 = lane; c0 < chunks_per_row; c0 += 32 * kGatherChunksPerLane) {
        uint4 v[kGatherChunksPerLane];
#pragma unroll
        for (int u = 0; u < kGatherChunksPerLane; ++u) {
          const int64_t c = c0 + 32 * u;
          v[u] = token >= 0 && c < chunks_per_row ? src[c] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kGatherChunksPerLane; ++u)
          if (c0 + 32 * u < chunks_per_row) __stcs(dst + c0 + 32 * u, v[u]);
      }
    }
    indexed = next_indexed;
  }
  allow_dependent_launch();
}

template <bool BY_PAIR>
void launch_copy_rows(const bf16* x, const int32_t* index, int top_k, int64_t n_items, int64_t cols,
                      bf16* out, cudaStream_t stream) {
  if (n_items == 0) return;
  constexpr int64_t kWarpsPerBlock = 8;  // an item a warp
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>((n_items + kWarpsPerBlock - 1) / kWarpsPerBlock, int64_t{sm_count()} * 8));
  launch_dependent(copy_rows_kernel<BY_PAIR>, dim3(blocks), dim3(32 * kWarpsPerBlock), 0, stream, x, index,
                   top_k, n_items, cols / 8, out);
}

}  // namespace

void gather_rows(const bf16* x, const int32_t* row_token, int64_t n_rows, int64_t cols, bf16* out,
                 cudaStream_t stream) {
  MOE_CUDA_REQUIRE(cols % 8 == 0, "gather_rows: columns " + std::to_string(cols) + " must be a multiple of 8");
  launch_copy_rows<false>(x, row_token, 1, n_rows, cols, out, stream);
}

void gather_pair_rows(const bf16* x, const int32_t* pair_rows, int64_t n_tokens, int top_k, int64_t cols,
                      bf16* out, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(cols % 8 == 0,
                   "gather_pair_rows: columns " + std::to_string(cols) + " must be a multiple of 8");
  MOE_CUDA_REQUIRE(top_k >= 1, "gather_pair_rows: top_k " + std::to_string(top_k) + " must be at least 1");
  launch_copy_rows<true>(x, pair_rows, top_k, n_tokens * top_k, cols, out, stream);
}

}  // namespace moe::cuda
