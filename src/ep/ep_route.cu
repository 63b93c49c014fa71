// Routing pairs to ranks on the device: each pair's replica (rank, slot), and the positions of each
// token's copies in the per-rank groups of the send buffer (a scan per rank, in token order).
#include <cub/block/block_scan.cuh>

#include "ep_kernels.h"
#include "cuda/check.h"

namespace moe::ep::kernels {

namespace {

constexpr int kScanThreads = 1024;

// One thread per token: its pairs' replicas, and a 0/1 flag per rank in copy_pos.
__global__ void destinations_kernel(const int32_t* __restrict__ ids, int64_t n_tokens, int top_k, ReplicaTable table,
                                    int n_ranks, int32_t* __restrict__ pair_rank, int32_t* __restrict__ pair_slot,
                                    int32_t* __restrict__ flags) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= n_tokens) return;
  uint64_t needs = 0;
  for (int j = 0; j < top_k; ++j) {
    const int e = ids[t * top_k + j];
    const int i = static_cast<int>(t % table.n_replicas[e]);
    const int r = table.rank[e * table.max_replicas + i];
    pair_rank[t * top_k + j] = r;
    pair_slot[t * top_k + j] = table.slot[e * table.max_replicas + i];
    needs |= uint64_t{1} << r;
  }
  for (int r = 0; r < n_ranks; ++r) flags[r * n_tokens + t] = static_cast<int32_t>((needs >> r) & 1u);
}

// One block per rank: exclusive scan of its flags in token order -> positions (-1 without a copy), total.
__global__ void __launch_bounds__(kScanThreads)
    positions_kernel(int32_t* __restrict__ copy_pos, int64_t n_tokens, int64_t* __restrict__ send_copies) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  int32_t* row = copy_pos + blockIdx.x * n_tokens;
  int32_t carry = 0;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kScanThreads) {
    const int64_t t = t0 + threadIdx.x;
    const int32_t flag = t < n_tokens ? row[t] : 0;
    int32_t before = 0, total = 0;
    Scan(temp).ExclusiveSum(flag, before, total);
    if (t < n_tokens) row[t] = flag ? carry + before : -1;
    carry += total;
    __syncthreads();  // temp is reused by the next chunk
  }
  if (threadIdx.x == 0) send_copies[blockIdx.x] = carry;
}

}  // namespace

void ep_route(const int32_t* topk_ids, int64_t n_tokens, int top_k, ReplicaTable table, int n_ranks,
              int32_t* pair_rank, int32_t* pair_slot, int32_t* copy_pos, int64_t* send_copies, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(n_ranks >= 1 && n_ranks <= kMaxRanks,
                   "expert parallelism on GPUs handles 1 to 64 ranks, got " + std::to_string(n_ranks));
  if (n_tokens == 0) {
    MOE_CUDA_CHECK(cudaMemsetAsync(send_copies, 0, sizeof(int64_t) * n_ranks, stream));
    return;
  }
  constexpr int kThreads = 128;
  destinations_kernel<<<static_cast<unsigned>((n_tokens + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      topk_ids, n_tokens, top_k, table, n_ranks, pair_rank, pair_slot, copy_pos);
  MOE_CUDA_CHECK_LAUNCH();
  positions_kernel<<<n_ranks, kScanThreads, 0, stream>>>(copy_pos, n_tokens, send_copies);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::ep::kernels
