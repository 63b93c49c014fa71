// Permute on the device: count pairs per expert, sort pair indices by expert (a stable counting sort, so
// tokens stay in order inside an expert), lay segments out contiguously or with a fixed capacity, and
// build the grouped GEMM's tile map. No host synchronisation: every size stays on the device.
#include <cub/block/block_scan.cuh>

#include <string>

#include "launch.h"
#include "core/knobs.h"
#include "cuda/check.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kScanThreads = 1024;  // one thread per expert in the single-block scans

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

// Expert e's segment, from its pair count and the pairs of the experts before it (an exclusive scan of the
// counts): its first row and its rows, in the contiguous layout (capacity < 0) or the padded one.
struct Segment {
  int32_t offset, rows;
};
__device__ __forceinline__ Segment segment_of(int e, int32_t count, int32_t before, int64_t capacity) {
  if (capacity < 0) return {before, count};
  return {static_cast<int32_t>(e * capacity), static_cast<int32_t>(count < capacity ? count : capacity)};
}

// Expert e's counters in the permute's buffers.
__device__ __forceinline__ void write_counters(const PermuteBuffers& b, int e, int32_t count, int32_t before,
                                               Segment segment) {
  b.expert_counts[e] = count;
  b.count_prefix[e] = before;
  b.expert_offsets[e] = segment.offset;
  b.segment_counts[e] = segment.rows;
  b.dropped[e] = count - segment.rows;
}

// Pair i of rank `rank` in its expert's segment (from segment_offset): its row, weight and token, or dropped
// (row -1, weight 0) past the padded layout's capacity or for rank < 0 (a pair of no expert).
__device__ __forceinline__ void place_pair(const PermuteBuffers& b, int64_t i, int64_t rank,
                                           int64_t segment_offset, int64_t capacity, float weight,
                                           int top_k) {
  if (rank < 0 || (capacity >= 0 && rank >= capacity)) {
    b.pair_rows[i] = -1;
    b.pair_weights[i] = 0.0f;
    return;
  }
  const int64_t row = segment_offset + rank;
  b.pair_rows[i] = static_cast<int32_t>(row);
  b.pair_weights[i] = weight;
  b.row_token[row] = static_cast<int32_t>(i / top_k);
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
  const Segment segment = segment_of(tid, count, before, capacity);
  if (tid < n_experts) {
    prefix[tid] = before;
    write_counters(b, tid, count, before, segment);
  }
  __syncthreads();
  const int32_t n_tiles_e = tid < n_experts ? tiles_of(segment.rows, tiles) : 0;
  int32_t first = 0, total = 0;
  Scan(temp).ExclusiveSum(n_tiles_e, first, total);
  if (tid == 0) *tiles.n_tiles = static_cast<int32_t>(total < tiles.max_tiles ? total : tiles.max_tiles);
  if (tid < n_experts) write_tiles(tid, segment.offset, segment.rows, first, tiles);

#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (begin + c * 32 >= end) break;
    const int i = begin + c * 32 + lane;
    const bool valid = i < end;
    const int32_t e = slice_ids[c];
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank_in_chunk = __popc(peers & ((1u << lane) - 1u));
    if (valid)
      place_pair(b, i, warp_base[warp][e] + rank_in_chunk, capacity < 0 ? prefix[e] : e * capacity, capacity,
                 slice_weights[c], top_k);
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
// NOTE: measured on the H200 (2026-11-30): at Qwen3 T=1024 (8192 pairs) 9.2 us against
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
  const Segment thread_segment = segment_of(tid, count, before, capacity);
  __syncthreads();  // temp is reused
  int32_t first_tile = 0, total_tiles = 0;
  Scan(temp).ExclusiveSum(tid < n_experts ? tiles_of(thread_segment.rows, tiles) : 0, first_tile,
                          total_tiles);
  if (tid == e) {
    segment[0] = thread_segment.offset;
    segment[1] = thread_segment.rows;
    segment[2] = first_tile;
    write_counters(b, e, count, before, thread_segment);
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
    place_pair(b, i, chunk_base[c][warp] + __popc(mine & lanes_before), segment_offset, capacity,
               topk_weights[i], top_k);
  }
}

// Larger batches (more than kSmallMaxPairs pairs, or more than kSmallMaxExperts experts): the same stable
// counting sort in two launches over chunks of kChunkPairs consecutive pairs, O(pairs) in all (a block per
// expert would read every id once per expert).
// NOTE: measured on the H200 (2026-12-01): at Qwen3 T=8192 (65,536 pairs) 5.0 + 8.9 us
// under ncu, where the count, CUB radix sort (3 launches), layout, tile and scatter launches before it took 33;
// the layer at Qwen3 T=4096 721-725 -> 704-709 us. Below kSmallMaxPairs the one-launch kernels stay: these
// two were 14 us slower at Qwen3 T=1024 (8,192 pairs) and 4 us at T=2048.
constexpr int kChunkThreads = 512, kChunkWarps = kChunkThreads / 32, kChunkPairs = 2048;
constexpr int kChunkSliceSteps = kChunkPairs / kChunkThreads;  // a warp's slice: this many runs of 32 pairs
constexpr size_t kChunkRankMaxSmem = size_t{kChunkWarps} * kScanThreads * sizeof(int32_t);
static_assert(kChunkPairs % kChunkThreads == 0 && kChunkPairs % kScanThreads == 0,
              "whole runs of 32 pairs a warp in launch 1, whole pairs a thread in launch 2");

// Launch 1, a block per chunk. Each warp owns a slice of the chunk's pairs; per-warp counts (shared memory,
// [kChunkWarps][n_experts]) give each warp its base inside every expert, and the warp walks its slice in
// order, 32 pairs at a time, ranking equal experts with __match_any_sync. Writes each pair's rank inside its
// expert within the chunk (pair_rank) and the chunk's count of every expert (chunk_counts[chunk][e]). Pairs
// of no expert (an id outside [0, n_experts)) are left out.
static __global__ void __launch_bounds__(kChunkThreads)
    chunk_rank_kernel(const int32_t* __restrict__ ids, int64_t n_pairs, int n_experts, int32_t* __restrict__ pair_rank,
                      int32_t* __restrict__ chunk_counts) {
  extern __shared__ int32_t warp_base[];  // [kChunkWarps][n_experts]
  wait_for_prior_grids();
  allow_dependent_launch();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < kChunkWarps * n_experts; i += kChunkThreads) warp_base[i] = 0;
  const int64_t slice = blockIdx.x * int64_t{kChunkPairs} + warp * (kChunkSliceSteps * 32);
  int32_t id[kChunkSliceSteps];
#pragma unroll
  for (int s = 0; s < kChunkSliceSteps; ++s) {
    const int64_t i = slice + s * 32 + lane;
    const int32_t v = i < n_pairs ? ids[i] : -1;
    id[s] = v >= 0 && v < n_experts ? v : -1;
  }
  __syncthreads();  // the zeroed counts
  int32_t* mine = warp_base + warp * n_experts;
#pragma unroll
  for (int s = 0; s < kChunkSliceSteps; ++s)
    if (id[s] >= 0) atomicAdd(&mine[id[s]], 1);
  __syncthreads();
  for (int e = tid; e < n_experts; e += kChunkThreads) {
    int32_t count = 0;
    for (int w = 0; w < kChunkWarps; ++w) {
      const int32_t c = warp_base[w * n_experts + e];
      warp_base[w * n_experts + e] = count;
      count += c;
    }
    chunk_counts[blockIdx.x * int64_t{n_experts} + e] = count;
  }
  __syncthreads();
  const unsigned lanes_before = (1u << lane) - 1u;
#pragma unroll
  for (int s = 0; s < kChunkSliceSteps; ++s) {
    const unsigned peers = __match_any_sync(0xffffffffu, id[s]);
    const int rank_in_run = __popc(peers & lanes_before);
    if (id[s] >= 0) pair_rank[slice + s * 32 + lane] = mine[id[s]] + rank_in_run;
    __syncwarp();
    if (id[s] >= 0 && rank_in_run == 0) mine[id[s]] += __popc(peers);
    __syncwarp();
  }
}

// Launch 2, a block per chunk (one block and no chunks for an empty batch). Thread e sums expert e's counts
// over all chunks and over the chunks before the block's own; the scan of the totals lays the segments out.
// The block places its chunk's pairs (row = segment offset + the expert's pairs in earlier chunks +
// pair_rank), and writes the counters, the tiles and the padded layout's unused rows of the experts
// e = blockIdx.x (mod gridDim.x).
static __global__ void __launch_bounds__(kScanThreads)
    chunk_place_kernel(const int32_t* __restrict__ ids, const float* __restrict__ topk_weights, int64_t n_pairs,
                       int top_k, int n_experts, int64_t capacity, int n_chunks, const int32_t* __restrict__ pair_rank,
                       const int32_t* __restrict__ chunk_counts, PermuteBuffers b, TileMap tiles) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int32_t rank_base[kScanThreads];  // the expert's pairs in the chunks before this block's
  __shared__ int32_t seg_offset[kScanThreads], seg_rows[kScanThreads], seg_first_tile[kScanThreads];
  wait_for_prior_grids();
  allow_dependent_launch();
  const int e = threadIdx.x;
  // Every load of the block issued at once (each round trip to memory is on the layer's critical path).
  constexpr int kPairsPerThread = kChunkPairs / kScanThreads;
  const int64_t first_pair = blockIdx.x * int64_t{kChunkPairs} + e;
  int32_t id[kPairsPerThread], rank_in_chunk[kPairsPerThread];
  float weight[kPairsPerThread];
#pragma unroll
  for (int j = 0; j < kPairsPerThread; ++j) {
    const int64_t i = first_pair + j * kScanThreads;
    const int32_t v = i < n_pairs ? ids[i] : -1;
    id[j] = v >= 0 && v < n_experts ? v : -1;
    rank_in_chunk[j] = i < n_pairs ? pair_rank[i] : 0;
    weight[j] = i < n_pairs ? topk_weights[i] : 0.0f;
  }
  int32_t total = 0, before_chunk = 0;
  if (e < n_experts) {
#pragma unroll 8
    for (int c = 0; c < n_chunks; ++c) {
      const int32_t v = __ldcg(chunk_counts + c * int64_t{n_experts} + e);
      before_chunk += c < static_cast<int>(blockIdx.x) ? v : 0;
      total += v;
    }
  }
  int32_t before = 0;
  Scan(temp).ExclusiveSum(total, before);
  const Segment segment = segment_of(e, total, before, capacity);
  __syncthreads();  // temp is reused
  int32_t first_tile = 0, total_tiles = 0;
  Scan(temp).ExclusiveSum(e < n_experts ? tiles_of(segment.rows, tiles) : 0, first_tile, total_tiles);
  if (e < n_experts) {
    rank_base[e] = before_chunk;
    seg_offset[e] = segment.offset;
    seg_rows[e] = segment.rows;
    seg_first_tile[e] = first_tile;
    if (e % gridDim.x == blockIdx.x) write_counters(b, e, total, before, segment);
  }
  if (blockIdx.x == 0 && e == 0)
    *tiles.n_tiles = static_cast<int32_t>(total_tiles < tiles.max_tiles ? total_tiles : tiles.max_tiles);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPairsPerThread; ++j) {
    const int64_t i = first_pair + j * kScanThreads;
    if (i >= n_pairs) break;
    if (id[j] < 0) {
      place_pair(b, i, -1, 0, capacity, 0.0f, top_k);
    } else {
      place_pair(b, i, int64_t{rank_base[id[j]]} + rank_in_chunk[j], seg_offset[id[j]], capacity, weight[j],
                 top_k);
    }
  }
  for (int x = blockIdx.x; x < n_experts; x += gridDim.x) {
    write_tiles(x, seg_offset[x], seg_rows[x], seg_first_tile[x], tiles, e, kScanThreads);
    if (capacity >= 0)
      for (int64_t r = seg_rows[x] + e; r < capacity; r += kScanThreads) b.row_token[seg_offset[x] + r] = -1;
  }
}

static __global__ void dense_segment_kernel(int32_t* offsets, int32_t* counts, int64_t n_rows) {
  offsets[0] = 0;
  counts[0] = static_cast<int32_t>(n_rows);
}

// The pair count from which E <= 256 batches take the chunked launches (MOE_PERMUTE_CHUNKED_FROM lowers it,
// to measure the one-launch kernels against them).
int64_t chunked_from() {
  static_assert(kSmallMaxPairs + 1 == kPermuteChunkedFromMax, "MOE_PERMUTE_CHUNKED_FROM's range (core/knobs.h)");
  return knobs().permute_chunked_from.value_or(kSmallMaxPairs + 1);
}

int grid_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 132 * 8))); }

}  // namespace

void permute(const int32_t* topk_ids, const float* topk_weights, int64_t n_tokens, int top_k, int n_experts,
             int64_t capacity, bool renormalize, const PermuteBuffers& b, const TileMap& tiles, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(n_experts >= 1 && n_experts <= kScanThreads,
                   "the CUDA permute handles 1 to 1024 experts, got " + std::to_string(n_experts));
  const int64_t n_pairs = n_tokens * top_k;
  MOE_CUDA_REQUIRE(n_pairs <= INT32_MAX, "the CUDA permute handles up to 2^31 - 1 (token, expert) pairs (int32 "
                                         "rows), got " + std::to_string(n_pairs) + ": split the batch");
  const bool small = n_experts <= kSmallMaxExperts && n_pairs < chunked_from();
  if (small && n_pairs < kExpertBlocksFrom) {
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
  if (small) {
    launch_dependent(permute_expert_blocks_kernel, dim3(static_cast<unsigned>(n_experts)), dim3(kExpertBlockThreads), 0,
                     stream, topk_ids, topk_weights, n_tokens, top_k, n_experts, capacity, b, tiles);
    if (capacity >= 0 && renormalize) {
      renormalize_kernel<<<grid_for(n_tokens), 256, 0, stream>>>(topk_weights, n_tokens, top_k, b.pair_weights);
      MOE_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  const int n_chunks = static_cast<int>((n_pairs + kChunkPairs - 1) / kChunkPairs);
  if (n_chunks > 0) {
    raise_shared_memory_once<chunk_rank_kernel>(kChunkRankMaxSmem);
    launch_dependent(chunk_rank_kernel, dim3(static_cast<unsigned>(n_chunks)), dim3(kChunkThreads),
                     kChunkWarps * n_experts * sizeof(int32_t), stream, topk_ids, n_pairs, n_experts, b.pair_rank,
                     b.chunk_counts);
  }
  launch_dependent(chunk_place_kernel, dim3(static_cast<unsigned>(std::max(n_chunks, 1))), dim3(kScanThreads), 0,
                   stream, topk_ids, topk_weights, n_pairs, top_k, n_experts, capacity, n_chunks,
                   static_cast<const int32_t*>(b.pair_rank), static_cast<const int32_t*>(b.chunk_counts), b, tiles);
  if (capacity >= 0 && renormalize) {
    renormalize_kernel<<<grid_for(n_tokens), 256, 0, stream>>>(topk_weights, n_tokens, top_k, b.pair_weights);
    MOE_CUDA_CHECK_LAUNCH();
  }
}

int64_t permute_chunk_count(int64_t max_pairs) { return (max_pairs + kChunkPairs - 1) / kChunkPairs; }

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
