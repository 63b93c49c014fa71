// Permute on the device: count pairs per expert, sort pair indices by expert (a stable radix sort, so
// tokens stay in order inside an expert), lay segments out contiguously or with a fixed capacity, and
// build the grouped GEMM's tile map. No host synchronisation: every size stays on the device.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <string>

#include "launch.h"
#include "moe/cuda/check.h"
#include "moe/cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kScanThreads = 1024;  // one thread per expert in the single-block scans

// Pairs per expert: a block counts its kCountPairsPerThread * blockDim.x pairs in shared memory (each thread
// loads its pairs' ids at once, then counts them), then adds each nonzero count once.
// NOTE: integer atomics: the counts are exact and order-free. One global atomic a pair, all on E counters,
// took 14 us at Qwen3 T=8192 (65,536 pairs on 128 experts), and a grid-stride loop of one load and one
// shared atomic at a time 8.6 us (bench/RESULTS.md, 11th session).
constexpr int kCountPairsPerThread = 16;

static __global__ void count_kernel(const int32_t* __restrict__ ids, int64_t n_pairs, int n_experts,
                                    int32_t* __restrict__ counts) {
  extern __shared__ int32_t block_counts[];
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) block_counts[e] = 0;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} * kCountPairsPerThread + threadIdx.x;
  int32_t id[kCountPairsPerThread];
#pragma unroll
  for (int j = 0; j < kCountPairsPerThread; ++j) {
    const int64_t i = first + int64_t{j} * blockDim.x;
    id[j] = i < n_pairs ? ids[i] : -1;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kCountPairsPerThread; ++j)
    if (id[j] >= 0) atomicAdd(&block_counts[id[j]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x)
    if (block_counts[e] != 0) atomicAdd(&counts[e], block_counts[e]);
}

static __global__ void iota_kernel(int32_t* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

// One block: prefix[e] = sum of counts before e; segments contiguous, or e * capacity with at most
// capacity rows and the rest counted as dropped.
static __global__ void layout_kernel(const int32_t* __restrict__ counts, int n_experts, int64_t capacity,
                                     int32_t* __restrict__ prefix, int32_t* __restrict__ offsets,
                                     int32_t* __restrict__ segment_counts, int32_t* __restrict__ dropped) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int e = threadIdx.x;
  const int32_t count = e < n_experts ? counts[e] : 0;
  int32_t before = 0;
  Scan(temp).ExclusiveSum(count, before);
  if (e >= n_experts) return;
  prefix[e] = before;
  if (capacity < 0) {
    offsets[e] = before;
    segment_counts[e] = count;
    dropped[e] = 0;
  } else {
    offsets[e] = static_cast<int32_t>(e * capacity);
    segment_counts[e] = static_cast<int32_t>(count < capacity ? count : capacity);
    dropped[e] = static_cast<int32_t>(count > capacity ? count - capacity : 0);
  }
}

// Sorted position r holds pair sorted_pairs[r] of expert sorted_keys[r]; its rank inside the expert is
// r - prefix[e] (token order, since the sort is stable).
static __global__ void scatter_kernel(const int32_t* __restrict__ sorted_keys, const int32_t* __restrict__ sorted_pairs,
                                      const int32_t* __restrict__ prefix, const int32_t* __restrict__ offsets,
                                      const float* __restrict__ topk_weights, int64_t n_pairs, int top_k,
                                      int64_t capacity, int32_t* __restrict__ row_token,
                                      int32_t* __restrict__ pair_rows, float* __restrict__ pair_weights) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < n_pairs; r += int64_t{gridDim.x} * blockDim.x) {
    const int32_t e = sorted_keys[r], pair = sorted_pairs[r];
    const int64_t rank = r - prefix[e];
    if (capacity >= 0 && rank >= capacity) {
      pair_rows[pair] = -1;
      pair_weights[pair] = 0.0f;
      continue;
    }
    const int64_t row = offsets[e] + rank;
    pair_rows[pair] = static_cast<int32_t>(row);
    pair_weights[pair] = topk_weights[pair];
    row_token[row] = pair / top_k;
  }
}

// renormalize: each token's kept weights are rescaled to its original weight sum.
static __global__ void renormalize_kernel(const float* __restrict__ topk_weights, int64_t n_tokens, int top_k,
                                          float* __restrict__ pair_weights) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n_tokens; t += int64_t{gridDim.x} * blockDim.x) {
    float original = 0.0f, kept = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      original += topk_weights[t * top_k + j];
      kept += pair_weights[t * top_k + j];
    }
    if (kept != original && kept != 0.0f)
      for (int j = 0; j < top_k; ++j) pair_weights[t * top_k + j] *= original / kept;
  }
}

// The tiles of a segment of `count` rows (TileMap): ceil(count / tile_rows), less the last one when the
// tile before it can take its at most tall_rows rows.
__device__ __forceinline__ int32_t tiles_with_rows(int32_t count, const TileMap& map) {
  const int32_t tiles = (count + map.tile_rows - 1) / map.tile_rows;
  return tiles > 1 && count - (tiles - 1) * map.tile_rows <= map.tall_rows ? tiles - 1 : tiles;
}
// ... and with even_tiles, one more, empty, where that count is odd.
__device__ __forceinline__ int32_t tiles_of(int32_t count, const TileMap& map) {
  const int32_t tiles = tiles_with_rows(count, map);
  return map.even_tiles && tiles % 2 == 1 ? tiles + 1 : tiles;
}

// Segment e's tiles from index `first` (its exclusive scan of tiles_of): tile i starts at row
// offset + i * tile_rows, an empty one (even_tiles) at the segment's end. The caller writes tiles
// i0, i0 + step, ... (a thread of several writing one segment's).
__device__ __forceinline__ void write_tiles(int e, int32_t offset, int32_t count, int32_t first, const TileMap& map,
                                            int32_t i0 = 0, int32_t step = 1) {
  const int32_t with_rows = tiles_with_rows(count, map), tiles = tiles_of(count, map);
  for (int32_t i = i0; i < tiles && first + i < map.max_tiles; i += step) {
    map.tile_expert[first + i] = e;
    map.tile_row[first + i] = i < with_rows ? offset + i * map.tile_rows : offset + count;
  }
}

static __global__ void tiles_kernel(const int32_t* __restrict__ offsets, const int32_t* __restrict__ counts,
                                    int n_experts, TileMap map) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int e = threadIdx.x;
  const int32_t tiles = e < n_experts ? tiles_of(counts[e], map) : 0;
  int32_t first = 0, total = 0;
  Scan(temp).ExclusiveSum(tiles, first, total);
  if (e == 0) *map.n_tiles = static_cast<int32_t>(total < map.max_tiles ? total : map.max_tiles);
  if (e < n_experts) write_tiles(e, offsets[e], counts[e], first, map);
}

// Small batches (E <= 256, at most kSmallMaxPairs pairs) take one launch for the whole permute and the tile
// map: below kExpertBlocksFrom pairs in one block, from there in a block per expert.
constexpr int kSmallMaxExperts = 256, kSmallMaxPairs = 16384, kExpertBlocksFrom = 4096;

// One block. Each warp owns a slice of the pairs; per-warp counts give each warp its base inside every
// expert, and the warp walks its slice in order, 32 pairs at a time, ranking equal experts with
// __match_any_sync: a stable counting sort. A warp loads its slice's ids and weights into registers at once
// (the passes over the slice were chains of dependent loads: Qwen3 T=1024, 8192 pairs, took 31.6 us in 8
// warps); the block takes 16 warps from kSmallWideFrom pairs and 8 below, where a larger block's scans and
// barriers would cost more than its shorter slices save.
constexpr int kSmallWideFrom = 2048;
static_assert(kExpertBlocksFrom % (16 * 32) == 0 && kSmallWideFrom % (8 * 32) == 0,
              "permute_one_block_kernel's register slices: whole chunks of 32 a warp at both thresholds");

template <int WARPS>
static __global__ void __launch_bounds__(WARPS * 32)
    permute_one_block_kernel(const int32_t* __restrict__ ids, const float* __restrict__ topk_weights,
                             int64_t n_tokens, int top_k, int n_experts, int64_t capacity, bool renormalize,
                             PermuteBuffers b, TileMap tiles) {
  constexpr int kThreads = WARPS * 32;
  static_assert(kThreads >= kSmallMaxExperts, "a thread per expert");
  static_assert(WARPS == 8 || WARPS == 16, "kChunks below covers the slices of the two launches of permute()");
  using Scan = cub::BlockScan<int32_t, kThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int32_t warp_base[WARPS][kSmallMaxExperts];
  __shared__ int32_t prefix[kSmallMaxExperts];
  wait_for_prior_grids();
  allow_dependent_launch();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n_pairs = static_cast<int>(n_tokens * top_k);
  for (int i = tid; i < WARPS * kSmallMaxExperts; i += kThreads) (&warp_base[0][0])[i] = 0;
  if (capacity >= 0)
    for (int64_t r = tid; r < n_experts * capacity; r += kThreads) b.row_token[r] = -1;
  __syncthreads();
  const int per_warp = (n_pairs + WARPS - 1) / WARPS;
  const int begin = min(n_pairs, warp * per_warp), end = min(n_pairs, begin + per_warp);
  // The slice's ids and weights in registers, loaded at once (independent loads: one latency, not one a
  // chunk); the launch keeps a slice within kChunks chunks of 32.
  constexpr int kChunks = (WARPS == 16 ? kExpertBlocksFrom : kSmallWideFrom) / kThreads;
  int32_t slice_ids[kChunks];
  float slice_weights[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = begin + c * 32 + lane;
    slice_ids[c] = i < end ? ids[i] : -1;
    slice_weights[c] = i < end ? topk_weights[i] : 0.0f;
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
    if (slice_ids[c] >= 0) atomicAdd(&warp_base[warp][slice_ids[c]], 1);
  __syncthreads();

  // Thread e: its expert's total, and each warp's exclusive base inside the expert.
  int32_t count = 0;
  if (tid < n_experts)
    for (int w = 0; w < WARPS; ++w) {
      const int32_t c = warp_base[w][tid];
      warp_base[w][tid] = count;
      count += c;
    }
  int32_t before = 0;
  Scan(temp).ExclusiveSum(tid < n_experts ? count : 0, before);
  int32_t segment_offset = 0, segment_count = 0;
  if (tid < n_experts) {
    segment_offset = capacity < 0 ? before : static_cast<int32_t>(tid * capacity);
    segment_count = capacity < 0 ? count : static_cast<int32_t>(count < capacity ? count : capacity);
    prefix[tid] = before;
    b.expert_counts[tid] = count;
    b.count_prefix[tid] = before;
    b.expert_offsets[tid] = segment_offset;
    b.segment_counts[tid] = segment_count;
    b.dropped[tid] = count - segment_count;
  }
  __syncthreads();
  const int32_t n_tiles_e = tid < n_experts ? tiles_of(segment_count, tiles) : 0;
  int32_t first = 0, total = 0;
  Scan(temp).ExclusiveSum(n_tiles_e, first, total);
  if (tid == 0) *tiles.n_tiles = static_cast<int32_t>(total < tiles.max_tiles ? total : tiles.max_tiles);
  if (tid < n_experts) write_tiles(tid, segment_offset, segment_count, first, tiles);

#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (begin + c * 32 >= end) break;
    const int i = begin + c * 32 + lane;
    const bool valid = i < end;
    const int32_t e = slice_ids[c];
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank_in_chunk = __popc(peers & ((1u << lane) - 1u));
    if (valid) {
      const int64_t rank = warp_base[warp][e] + rank_in_chunk;
      if (capacity >= 0 && rank >= capacity) {
        b.pair_rows[i] = -1;
        b.pair_weights[i] = 0.0f;
      } else {
        const int64_t row = capacity < 0 ? prefix[e] + rank : e * capacity + rank;
        b.pair_rows[i] = static_cast<int32_t>(row);
        b.pair_weights[i] = slice_weights[c];
        b.row_token[row] = i / top_k;
      }
    }
    __syncwarp();
    if (valid && rank_in_chunk == 0) warp_base[warp][e] += __popc(peers);
    __syncwarp();
  }
  if (capacity < 0 || !renormalize) return;
  __syncthreads();
  for (int64_t t = tid; t < n_tokens; t += kThreads) {
    float original = 0.0f, kept = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      original += topk_weights[t * top_k + j];
      kept += b.pair_weights[t * top_k + j];
    }
    if (kept != original && kept != 0.0f)
      for (int j = 0; j < top_k; ++j) b.pair_weights[t * top_k + j] *= original / kept;
  }
}

// A block per expert, with no communication between blocks. Every block loads all the ids (32 a thread at
// most), counts every expert's pairs in shared memory and scans the counts, so that it knows its segment's
// offset and its first tile; then it writes its own expert's part: counters, tiles, and its pairs in pair
// order (a ballot per warp and chunk, and a scan of those counts over the block, rank each pair): a stable
// counting sort.
// NOTE: measured on the H200 (bench/RESULTS.md, 11th session): at Qwen3 T=1024 (8192 pairs) 9.2 us against
// the one-block kernel's 17 (the layer 404 -> 396 us); at 128 and 1024 pairs the layer ran 10 and 3 us
// slower than with the one-block kernel, hence kExpertBlocksFrom.
constexpr int kExpertBlockThreads = 512, kExpertBlockWarps = kExpertBlockThreads / 32;
constexpr int kExpertBlockChunks = kSmallMaxPairs / kExpertBlockThreads;  // ids a thread
static_assert(kExpertBlockChunks * kExpertBlockWarps == kExpertBlockThreads,
              "one scanned count a thread: (chunk, warp) pairs");
static_assert(kExpertBlockThreads >= kSmallMaxExperts, "a thread per expert in the scans");

static __global__ void __launch_bounds__(kExpertBlockThreads)
    permute_expert_blocks_kernel(const int32_t* __restrict__ ids, const float* __restrict__ topk_weights,
                                 int64_t n_tokens, int top_k, int n_experts, int64_t capacity, PermuteBuffers b,
                                 TileMap tiles) {
  using Scan = cub::BlockScan<int32_t, kExpertBlockThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int32_t counts[kSmallMaxExperts];
  __shared__ int32_t chunk_base[kExpertBlockChunks][kExpertBlockWarps];  // matches of (chunk, warp), then scanned
  __shared__ int32_t segment[3];  // this expert's offset, rows and first tile
  wait_for_prior_grids();
  allow_dependent_launch();
  const int e = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x), warp = tid / 32,
            lane = tid % 32;
  const int n_pairs = static_cast<int>(n_tokens * top_k);
  for (int i = tid; i < n_experts; i += kExpertBlockThreads) counts[i] = 0;
  // Pair c * kExpertBlockThreads + tid is this thread's c-th (coalesced loads, all in flight at once).
  int32_t id[kExpertBlockChunks];
#pragma unroll
  for (int c = 0; c < kExpertBlockChunks; ++c) {
    const int i = c * kExpertBlockThreads + tid;
    id[c] = i < n_pairs ? ids[i] : -1;
  }
  __syncthreads();
#pragma unroll
  for (int c = 0; c < kExpertBlockChunks; ++c)
    if (id[c] >= 0 && id[c] < n_experts) atomicAdd(&counts[id[c]], 1);
  __syncthreads();

  // Thread t: expert t's segment, and (scanned) the rows and tiles of the experts before it.
  const int32_t count = tid < n_experts ? counts[tid] : 0;
  int32_t before = 0;
  Scan(temp).ExclusiveSum(count, before);
  const int32_t rows = capacity < 0 ? count : static_cast<int32_t>(count < capacity ? count : capacity);
  const int32_t offset = capacity < 0 ? before : static_cast<int32_t>(tid * capacity);
  __syncthreads();  // temp is reused
  int32_t first_tile = 0, total_tiles = 0;
  Scan(temp).ExclusiveSum(tid < n_experts ? tiles_of(rows, tiles) : 0, first_tile, total_tiles);
  if (tid == e) {
    segment[0] = offset;
    segment[1] = rows;
    segment[2] = first_tile;
    b.expert_counts[e] = count;
    b.count_prefix[e] = before;
    b.expert_offsets[e] = offset;
    b.segment_counts[e] = rows;
    b.dropped[e] = count - rows;
  }
  if (e == 0 && tid == 0)
    *tiles.n_tiles = static_cast<int32_t>(total_tiles < tiles.max_tiles ? total_tiles : tiles.max_tiles);
#pragma unroll
  for (int c = 0; c < kExpertBlockChunks; ++c) {
    const unsigned mine = __ballot_sync(0xffffffffu, id[c] == e);
    if (lane == 0) chunk_base[c][warp] = __popc(mine);
  }
  __syncthreads();
  const int32_t matches = (&chunk_base[0][0])[tid];
  int32_t matches_before = 0;
  Scan(temp).ExclusiveSum(matches, matches_before);
  (&chunk_base[0][0])[tid] = matches_before;
  __syncthreads();

  const int32_t segment_offset = segment[0], segment_rows = segment[1];
  write_tiles(e, segment_offset, segment_rows, segment[2], tiles, tid, kExpertBlockThreads);
  if (capacity >= 0)  // the segment's unused rows
    for (int64_t r = segment_rows + tid; r < capacity; r += kExpertBlockThreads) b.row_token[segment_offset + r] = -1;
  const unsigned lanes_before = (1u << lane) - 1u;
#pragma unroll
  for (int c = 0; c < kExpertBlockChunks; ++c) {
    const unsigned mine = __ballot_sync(0xffffffffu, id[c] == e);
    if (id[c] != e) continue;
    const int i = c * kExpertBlockThreads + tid;
    const int64_t rank = chunk_base[c][warp] + __popc(mine & lanes_before);
    if (capacity >= 0 && rank >= capacity) {
      b.pair_rows[i] = -1;
      b.pair_weights[i] = 0.0f;
    } else {
      const int64_t row = segment_offset + rank;
      b.pair_rows[i] = static_cast<int32_t>(row);
      b.pair_weights[i] = topk_weights[i];
      b.row_token[row] = i / top_k;
    }
  }
}

static __global__ void dense_segment_kernel(int32_t* offsets, int32_t* counts, int64_t n_rows) {
  offsets[0] = 0;
  counts[0] = static_cast<int32_t>(n_rows);
}

int grid_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 132 * 8))); }

int key_bits(int n_experts) {
  int bits = 1;
  while ((1 << bits) < n_experts) ++bits;
  return bits;
}

}  // namespace

size_t permute_sort_temp_bytes(int64_t max_pairs) {
  size_t bytes = 0;
  MOE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<int>(max_pairs)));
  return bytes;
}

void permute(const int32_t* topk_ids, const float* topk_weights, int64_t n_tokens, int top_k, int n_experts,
             int64_t capacity, bool renormalize, const PermuteBuffers& b, const TileMap& tiles, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(n_experts >= 1 && n_experts <= kScanThreads,
                   "the CUDA permute handles 1 to 1024 experts, got " + std::to_string(n_experts));
  const int64_t n_pairs = n_tokens * top_k;
  if (n_experts <= kSmallMaxExperts && n_pairs < kExpertBlocksFrom) {
    // NOTE: each variant's kChunks covers its slices: < kExpertBlocksFrom pairs over 16 warps, < 2048 over 8.
    if (n_pairs >= kSmallWideFrom) {
      launch_dependent(permute_one_block_kernel<16>, dim3(1), dim3(16 * 32), 0, stream, topk_ids, topk_weights,
                       n_tokens, top_k, n_experts, capacity, renormalize, b, tiles);
    } else {
      launch_dependent(permute_one_block_kernel<8>, dim3(1), dim3(8 * 32), 0, stream, topk_ids, topk_weights,
                       n_tokens, top_k, n_experts, capacity, renormalize, b, tiles);
    }
    return;
  }
  if (n_experts <= kSmallMaxExperts && n_pairs <= kSmallMaxPairs) {
    launch_dependent(permute_expert_blocks_kernel, dim3(static_cast<unsigned>(n_experts)), dim3(kExpertBlockThreads), 0,
                     stream, topk_ids, topk_weights, n_tokens, top_k, n_experts, capacity, b, tiles);
    if (capacity >= 0 && renormalize) {
      renormalize_kernel<<<grid_for(n_tokens), 256, 0, stream>>>(topk_weights, n_tokens, top_k, b.pair_weights);
      MOE_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  const int64_t n_rows = capacity < 0 ? n_pairs : n_experts * capacity;
  MOE_CUDA_CHECK(cudaMemsetAsync(b.expert_counts, 0, sizeof(int32_t) * n_experts, stream));
  if (capacity >= 0) MOE_CUDA_CHECK(cudaMemsetAsync(b.row_token, 0xff, sizeof(int32_t) * n_rows, stream));  // -1
  if (n_pairs > 0) {
    const int64_t pairs_per_block = int64_t{256} * kCountPairsPerThread;
    const auto count_blocks = static_cast<unsigned>((n_pairs + pairs_per_block - 1) / pairs_per_block);
    count_kernel<<<count_blocks, 256, n_experts * sizeof(int32_t), stream>>>(topk_ids, n_pairs, n_experts,
                                                                           b.expert_counts);
    MOE_CUDA_CHECK_LAUNCH();
    size_t temp_bytes = b.sort_temp_bytes;
    MOE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.sort_temp, temp_bytes, topk_ids, b.sorted_keys, b.pair_iota,
                                                   b.sorted_pairs, static_cast<int>(n_pairs), 0,
                                                   key_bits(n_experts), stream));
  }
  layout_kernel<<<1, kScanThreads, 0, stream>>>(b.expert_counts, n_experts, capacity, b.count_prefix,
                                                b.expert_offsets, b.segment_counts, b.dropped);
  MOE_CUDA_CHECK_LAUNCH();
  build_tiles(b.expert_offsets, b.segment_counts, n_experts, tiles, stream);
  if (n_pairs == 0) return;
  scatter_kernel<<<grid_for(n_pairs), 256, 0, stream>>>(b.sorted_keys, b.sorted_pairs, b.count_prefix,
                                                        b.expert_offsets, topk_weights, n_pairs, top_k, capacity,
                                                        b.row_token, b.pair_rows, b.pair_weights);
  MOE_CUDA_CHECK_LAUNCH();
  if (capacity >= 0 && renormalize) {
    renormalize_kernel<<<grid_for(n_tokens), 256, 0, stream>>>(topk_weights, n_tokens, top_k, b.pair_weights);
    MOE_CUDA_CHECK_LAUNCH();
  }
}

void fill_iota(int32_t* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  iota_kernel<<<grid_for(n), 256, 0, stream>>>(out, n);
  MOE_CUDA_CHECK_LAUNCH();
}

void dense_segment(int32_t* segment_offsets, int32_t* segment_counts, int64_t n_rows, cudaStream_t stream) {
  dense_segment_kernel<<<1, 1, 0, stream>>>(segment_offsets, segment_counts, n_rows);
  MOE_CUDA_CHECK_LAUNCH();
}

void build_tiles(const int32_t* segment_offsets, const int32_t* segment_counts, int n_experts, const TileMap& tiles,
                 cudaStream_t stream) {
  MOE_CUDA_REQUIRE(n_experts >= 1 && n_experts <= kScanThreads, "build_tiles handles 1 to 1024 experts");
  // NOTE: tall_rows < tile_rows keeps a tile that is not its segment's last above tile_rows + tall_rows rows
  // left, which is how the wgmma kernel tells the last (tall) one.
  MOE_CUDA_REQUIRE(tiles.tile_rows >= 1 && tiles.tall_rows >= 0 && tiles.tall_rows < tiles.tile_rows,
                   "build_tiles: tile_rows " + std::to_string(tiles.tile_rows) + " must be >= 1 and tall_rows " +
                       std::to_string(tiles.tall_rows) + " in [0, tile_rows)");
  tiles_kernel<<<1, kScanThreads, 0, stream>>>(segment_offsets, segment_counts, n_experts, tiles);
  MOE_CUDA_CHECK_LAUNCH();
}

void build_tiles(const int32_t* segment_offsets, const int32_t* segment_counts, int n_experts, int tile_rows,
                 int32_t* tile_expert, int32_t* tile_row, int32_t* n_tiles, int64_t max_tiles, cudaStream_t stream) {
  build_tiles(segment_offsets, segment_counts, n_experts,
              TileMap{.tile_rows = tile_rows, .tile_expert = tile_expert, .tile_row = tile_row, .n_tiles = n_tiles,
                      .max_tiles = max_tiles},
              stream);
}

}  // namespace moe::cuda
