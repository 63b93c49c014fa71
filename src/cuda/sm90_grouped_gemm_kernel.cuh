#pragma once
// Hopper grouped GEMM for prefill: a persistent kernel with TMA loads, wgmma (bf16 in, fp32 accumulate)
// and a warp-specialised pipeline. One block per SM, three warpgroups:
//   warpgroup 0, one thread: the producer. It walks the same work list as the consumers and, for every
//     64-wide slice of K, waits for a free stage, then has the copy engine load the A tile (128 rows) and
//     the B tile (256 weight rows, two boxes of 128) into it; the stage's "full" mbarrier completes when
//     the bytes have landed.
//   warpgroups 1 and 2: the consumers. Each owns 64 of the 128 rows and issues m64n256k16 wgmmas from the
//     stage, keeps one k-block of wgmmas in flight, and frees a stage (its "empty" mbarrier) once the
//     wgmmas that read it have retired. Then the epilogue: SwiGLU in registers (gate and up columns sit
//     in the same thread) and bf16 stores, masked to the tile's segment and to N (where N allows, lanes
//     swap column pairs so that each quad's stores fill whole 32-byte sectors: SECTOR STORES below). With
//     the staged epilogue (an option, STAGED at the kernel) the stores go to a shared-memory buffer instead,
//     which warps 1-3 of warpgroup 0 copy to C while the consumers run the next unit (3 stages then, not 4).
// Work units are (row tile of the device tile map, column tile), rastered so that a group of row tiles
// (8 by default) walks every column tile together: the rows stay in L2, and the row tiles of one expert
// read its weight tiles at about the same time, so that most weight bytes come from memory once. The
// producer claims the units: from a global counter as its block finishes one (claimed units: the units in
// flight stay a window of consecutive units however far the blocks drift apart in time) or a fixed stride
// of the list. It decodes each from the tile map and posts it to the consumers in a per-block mailbox in
// global memory, ordered by the unit's first "full" mbarrier (release by the producer's arrival, acquire by
// the consumers' wait); a unit of no expert ends the walk. The mailbox is in global memory so that nothing
// but the tiles passes through shared memory (compute-sanitizer's racecheck cannot see an mbarrier order
// a shared-memory handoff). With half tiles on, a tile
// whose valid rows all fall in the first 64 leaves the second consumer idle for that unit (see
// wgmma_schedule_for for when that pays). From 256 rows per expert the blocks run in clusters of 2 that
// share each weight tile by TMA multicast (PAIRS, at the kernel); below that, in gate/up GEMMs of long K,
// clusters of 2 on two column tiles of one row tile that share its A tile (COLUMN_PAIRS). A tall tile (an
// expert's last, with up to kTallRows rows past its 128; TileMap::tall_rows) also loads those rows and
// multiplies them by the same weight tile as a small GEMM with the roles swapped (weights as wgmma's M side,
// the extra rows as N = 32), so that the few rows past an expert's last full tile cost a quarter of a tile's
// math and no weight traffic, instead of a tile of their own. The number of row tiles is read on the device,
// so nothing here synchronises with the host.
// Its tile sizes and shared-memory layout, its parameters, the work-unit decoding and the kernel; the host
// launch is sm90_grouped_gemm.cu, the policy that picks the schedule grouped_gemm_plan.cpp.
// NOTE: included by sm90_grouped_gemm.cu alone (internal linkage, as when it was one file).
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "launch.h"
#include "sm90_wgmma_ptx.cuh"
#include "swiglu.cuh"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

constexpr int kBM = 128;           // rows of A per tile (two consumer warpgroups of 64)
constexpr int kBN = 256;           // weight rows per tile (SwiGLU: 128 gate + 128 up)
constexpr int kBK = 64;            // K per stage: 128 bytes of bf16, one 128-byte swizzle atom
constexpr int kMaxStages = 4;      // 4 x 52 KB of the 227 KB of shared memory
constexpr int kThreads = 384;      // producer warpgroup + 2 consumer warpgroups
constexpr int kATileBytes = kBM * kBK * 2;  // 16 KB
constexpr int kBBoxRows = 128;              // TMA boxes are at most 256 rows; two boxes per B tile
constexpr int kBBoxBytes = kBBoxRows * kBK * 2;  // 16 KB
constexpr int kSliceBytes = 64 * kBK * 2;        // 64 rows of a tile: a wgmma's M (or a consumer's A half)
constexpr int kBTileBytes = kBN * kBK * 2;  // 32 KB
constexpr int kTallRows = kWgmmaTallRows;        // rows a tall tile holds past its 128 (wgmma N = 32)
constexpr int kTallTileBytes = kTallRows * kBK * 2;  // 4 KB
// A stage: the A tile, the B tile, then a tall tile's extra rows (loaded only for tall tiles).
constexpr int kStageBytes = kATileBytes + kBTileBytes + kTallTileBytes;
static_assert(kStageBytes % 1024 == 0, "the 128-byte swizzle needs every tile 1024-byte aligned");
// The staged epilogue's buffer (STAGED, at the kernel) takes the place of the fourth stage.
constexpr int stages(bool staged) { return staged ? kMaxStages - 1 : kMaxStages; }
// STAGED: after the stages, the buffer of a tile's 128 output rows of bf16. Each row is 16 bytes longer
// than its columns, so that a consumer warp's 4-byte stores (8 rows x 4 column pairs) hit 32 different banks.
constexpr int staging_row_bytes(bool swiglu) { return (swiglu ? kBN / 2 : kBN) * 2 + 16; }
constexpr int staging_bytes(bool swiglu, bool staged) { return staged ? kBM * staging_row_bytes(swiglu) : 0; }
static_assert(staging_row_bytes(true) % 16 == 0 && staging_row_bytes(false) % 16 == 0,
              "the store warps copy the staged rows in 16-byte vectors");
// Then the barriers: full and empty (8 bytes each per stage); and at kStagedUnitOffset into them the unit
// whose rows the buffer holds (int4, STAGED).
constexpr int kStagedUnitOffset = 128;
static_assert(kMaxStages * (8 + 8) <= kStagedUnitOffset && kStagedUnitOffset + 16 <= 256,
              "barriers overflow their shared memory");
// STAGED: the consumers hand the buffer to the store warps (warps 1-3) and back through two named barriers
// that all their threads sync on (not mbarriers or bar.arrive, whose ordering compute-sanitizer's racecheck
// does not see).
constexpr uint32_t kStagedBarrier = 1, kFreeBarrier = 2;
constexpr int kStoreThreads = 96;
constexpr uint32_t kHandoffThreads = 256 + kStoreThreads;
constexpr size_t smem_bytes(bool swiglu, bool staged) {
  return static_cast<size_t>(stages(staged)) * kStageBytes + staging_bytes(swiglu, staged) + 1024 /* alignment */ +
         256 /* barriers */;
}
constexpr size_t kMaxSmemBytes = 227 * 1024;  // a block's dynamic shared memory on Hopper, opted in
static_assert(smem_bytes(true, false) <= kMaxSmemBytes && smem_bytes(false, false) <= kMaxSmemBytes &&
                  smem_bytes(true, true) <= kMaxSmemBytes && smem_bytes(false, true) <= kMaxSmemBytes,
              "the stages, the staging buffer and the barriers overflow shared memory");
// The scheduler ints: the next unclaimed unit, the blocks that claimed their last one, then a mailbox of
// kMaxStages units (int4) per block, of which an instance uses one per stage. A mailbox slot is rewritten
// a stage count of units later, after the producer's wait for the stage that the consumers freed after
// reading it.
constexpr int kMaxBlocks = 1024;
constexpr int kMailboxOffset = 4;  // ints; keeps the mailboxes 16-byte aligned
// Pairs of blocks (see PAIRS below) pass the units that the first claims to the second through a ring of
// kTicketSlots tickets (int64, unit + 1; 0 = empty, the second zeroes what it took) per pair, after them.
constexpr int kTicketSlots = 8;
constexpr int64_t kTicketOffset = kMailboxOffset + int64_t{kMaxBlocks} * kMaxStages * 4;
constexpr int64_t kSchedulerInts = kTicketOffset + int64_t{kMaxBlocks / 2} * kTicketSlots * 2;

struct WgmmaParams {
  const int32_t* segment_offsets;
  const int32_t* segment_counts;
  const int32_t* tile_expert;
  const int32_t* tile_row;
  const int32_t* n_tiles;
  bf16* c;
  int64_t n;          // output columns (SwiGLU: I)
  int64_t b_rows;     // weight rows per expert (SwiGLU: 2I)
  int32_t k_blocks;   // ceil(K / 64); the tensor maps zero-fill past K
  int32_t n_col_tiles;
  int32_t max_tiles;
  int32_t tall_rows;    // GroupedGemmArgs::tall_rows: 0 or kTallRows
  int32_t raster_rows;  // WgmmaSchedule::raster_rows
  bool half_tiles;      // WgmmaSchedule::half_tiles
  WgmmaSchedule::L2Hint a_hint, b_hint;
  bool claimed_units;   // WgmmaSchedule::claimed_units (pairs: the first block of each pair claims)
  bool sector_stores;   // SECTOR STORES in the unstaged epilogue (N % 16 == 0, C 32-byte aligned)
  int32_t* scheduler;   // GroupedGemmArgs::scheduler: the next unclaimed unit, the blocks done, the mailboxes
};

// A work unit: rows [row0, row0 + rows) of A (rows <= 128 + tall_rows, all in one segment) times column
// tile col.
// shared_b (pairs): the peer CTA's unit has the same weight tile (pair_unit_of); shared_a (column pairs):
// the same A tile (column_pair_unit_of).
struct Unit {
  int32_t row0, rows, col, expert;
  bool shared_b, shared_a;
};

#ifdef MOE_WGMMA_DEVICE

__device__ __forceinline__ __nv_bfloat162 shfl_xor_bf162(__nv_bfloat162 v, int mask) {
  const uint32_t bits = __shfl_xor_sync(0xffffffffu, *reinterpret_cast<const uint32_t*>(&v), mask);
  return *reinterpret_cast<const __nv_bfloat162*>(&bits);
}

// Work unit w -> (row index, column tile) over n_rows row indices (row tiles, or pairs of them): groups of
// raster_rows consecutive rows, column tile slowest inside a group, so that the blocks running at one time
// share a few row tiles and the weight tiles of few experts.
__device__ __forceinline__ int2 raster(const WgmmaParams& p, int64_t w, int n_rows, int n_cols) {
  const int64_t span = int64_t{p.raster_rows} * n_cols;
  const int group = static_cast<int>(w / span), within = static_cast<int>(w % span);
  const int group_rows = min(p.raster_rows, n_rows - group * p.raster_rows);
  return make_int2(group * p.raster_rows + within % group_rows, within / group_rows);
}

// Row tile `tile` of the tile map times column tile `col`.
__device__ __forceinline__ Unit unit_of(const WgmmaParams& p, int tile, int col) {
  Unit u;
  u.expert = p.tile_expert[tile];
  u.row0 = p.tile_row[tile];
  // NOTE: with tall tiles, only an expert's last tile has at most 128 + tall_rows rows left (TileMap).
  const int left = p.segment_offsets[u.expert] + p.segment_counts[u.expert] - u.row0;
  u.rows = max(0, left <= kBM + p.tall_rows ? left : kBM);
  u.col = col;
  u.shared_b = u.shared_a = false;
  return u;
}

// Pairs: unit w is (pair of row tiles 2i and 2i + 1, column tile); cluster CTA `rank` takes tile 2i + rank.
// A lone last tile goes to both CTAs, with no rows to store for the second. shared_b: both tiles belong to
// one expert, so the two CTAs need the same weight tile and each loads half of it for both (shared_b).
__device__ __forceinline__ Unit pair_unit_of(const WgmmaParams& p, int64_t w, int n_tiles, uint32_t rank) {
  const int2 rc = raster(p, w, (n_tiles + 1) / 2, p.n_col_tiles);
  const int first = 2 * rc.x;
  const bool lone = first + 1 >= n_tiles;
  Unit u = unit_of(p, lone ? first : first + static_cast<int>(rank), rc.y);
  if (lone && rank == 1) u.rows = 0;
  u.shared_b = !lone && p.tile_expert[first] == p.tile_expert[first + 1];
  return u;
}

// Column pairs: unit w is (row tile, pair of column tiles 2j and 2j + 1); cluster CTA `rank` takes column
// tile 2j + rank and loads half of the row tile's A rows for both (shared_a). A lone last column tile goes
// to both CTAs, each loading all of A, with no rows to store for the second.
__device__ __forceinline__ Unit column_pair_unit_of(const WgmmaParams& p, int64_t w, int n_tiles,
                                                    uint32_t rank) {
  const int2 rc = raster(p, w, n_tiles, (p.n_col_tiles + 1) / 2);
  const int first = 2 * rc.y;
  const bool lone = first + 1 >= p.n_col_tiles;
  Unit u = unit_of(p, rc.x, lone ? first : first + static_cast<int>(rank));
  if (lone && rank == 1) u.rows = 0;
  u.shared_a = !lone;
  return u;
}

#endif  // MOE_WGMMA_DEVICE

// PAIRS: clusters of 2 CTAs on the two row tiles of a pair (see pair_unit_of). Where both tiles are one
// expert's, each CTA's producer loads its own A tile and one half of the shared weight tile, multicast into
// both CTAs: the two read a weight tile from L2 once instead of twice, and each stage moves 32 KB from L2
// per CTA instead of 48 (the kernel is bound by L2: 94-98% of its throughput in ncu at 128 x 256 tiles).
// With COLUMN_PAIRS (PAIRS too) the clusters take two column tiles of one row tile instead
// (column_pair_unit_of), and each producer loads its own weight tile and 64 of the A tile's rows (map_a_half)
// into both CTAs: 40 KB a stage from L2 per CTA, where one row tile per expert leaves no weight tile to
// share. So that a stage is rewritten only when both CTAs are done with it, each CTA's empty barriers count
// the consumer warps of both, and both CTAs walk the same units (the first claims, the second takes its
// tickets). STAGED: the consumers leave each unit's output in a shared-memory buffer and go on to the next
// unit's k-loop, while warps 1-3 of the producer's warpgroup (the store warps) copy it to C; at short K the
// scattered stores of the epilogue otherwise leave the tensor cores idle (ncu: ~51% busy at K = 768).
template <bool SWIGLU, bool PAIRS, bool STAGED, bool COLUMN_PAIRS>
static __global__ void __launch_bounds__(kThreads, 1)
    wgmma_grouped_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                              const __grid_constant__ CUtensorMap map_b,
                              const __grid_constant__ CUtensorMap map_tall,
                              const __grid_constant__ CUtensorMap map_a_half, const WgmmaParams p) {
#ifdef MOE_WGMMA_DEVICE
  extern __shared__ unsigned char smem_raw[];
  // NOTE: the 128-byte swizzle repeats every 1024 bytes and the descriptors assume base offset 0. An offset
  // from smem_raw, so that the compiler knows the pointers below as shared (st.shared, not generic stores).
  unsigned char* const smem = smem_raw + (-smem_addr(smem_raw) & 1023u);
  constexpr int kStages = stages(STAGED);
  constexpr int kStagingRowBytes = staging_row_bytes(SWIGLU);
  const uint32_t tiles_base = smem_addr(smem);
  unsigned char* const staging = smem + kStages * kStageBytes;
  unsigned char* const barriers = staging + staging_bytes(SWIGLU, STAGED);
  const uint32_t full_bar = smem_addr(barriers);  // kStages barriers of 8 bytes
  const uint32_t empty_bar = full_bar + kStages * 8;
  int4* const staged_unit = reinterpret_cast<int4*>(barriers + kStagedUnitOffset);  // STAGED
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);                 // the producer's expect_tx arrival (+ the copies' bytes)
      mbar_init(empty_bar + 8 * s, PAIRS ? 16 : 8);   // one arrival per consumer warp (of both CTAs)
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_tall)) : "memory");
    if (COLUMN_PAIRS)
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a_half)) : "memory");
  }
  if constexpr (PAIRS) {
    cluster_sync();  // the peer's barriers exist before anything arrives on them or copies into its stages
  } else {
    __syncthreads();
  }
  wait_for_prior_grids();  // the tile map and the A rows come from the kernels before
  constexpr int OUT_COLS = SWIGLU ? kBN / 2 : kBN;

  if (warpgroup == 0) {
    // NOTE: setmaxnreg moves registers from the producer (which needs few) to the consumers (128
    // accumulators each); it is warpgroup-wide, so the whole warpgroup runs it before all but one thread idle.
    // 56 + 2 x 224 keeps the 168 a thread of the launch; at 40 the pairs' producer spilled (ptxas -v).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    if (threadIdx.x == 0) {
      const uint32_t rank = PAIRS ? cluster_rank() : 0;
      const int n_tiles = min(*p.n_tiles, p.max_tiles);
      const int64_t total = !PAIRS         ? int64_t{n_tiles} * p.n_col_tiles
                            : COLUMN_PAIRS ? int64_t{n_tiles} * ((p.n_col_tiles + 1) / 2)
                                           : int64_t{(n_tiles + 1) / 2} * p.n_col_tiles;
      const uint64_t a_policy = l2_policy(p.a_hint), b_policy = l2_policy(p.b_hint);
      int32_t* const next_unit = p.scheduler;
      int32_t* const blocks_done = p.scheduler + 1;
      int4* const mailbox = reinterpret_cast<int4*>(p.scheduler + kMailboxOffset) + blockIdx.x * kMaxStages;
      unsigned long long* const tickets =
          reinterpret_cast<unsigned long long*>(p.scheduler + kTicketOffset) + (blockIdx.x / 2) * kTicketSlots;
      const int claimers = PAIRS ? gridDim.x / 2 : gridDim.x, claimer = PAIRS ? blockIdx.x / 2 : blockIdx.x;
      int ticket = 0;
      const auto claim = [&](int64_t previous) -> int64_t {
        if (PAIRS && rank == 1) {  // the unit the first CTA of the pair claimed
          unsigned long long taken = 0;
          do {
            asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(taken) : "l"(tickets + ticket) : "memory");
          } while (taken == 0);
          tickets[ticket] = 0;
          ticket = ticket + 1 == kTicketSlots ? 0 : ticket + 1;
          return static_cast<int64_t>(taken) - 1;
        }
        const int64_t w = p.claimed_units ? atomicAdd(next_unit, 1) : previous < 0 ? claimer : previous + claimers;
        if (PAIRS) {
          // NOTE: the slot was last used kTicketSlots units ago; the second CTA took it before it issued that
          // unit's first stage, which its consumers freed before this CTA's producer got this far.
          asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(tickets + ticket),
                       "l"(static_cast<unsigned long long>(w + 1))
                       : "memory");
          ticket = ticket + 1 == kTicketSlots ? 0 : ticket + 1;
        }
        return w;
      };
      const auto decode = [&](int64_t w) {
        if constexpr (PAIRS) {
          if constexpr (COLUMN_PAIRS) return column_pair_unit_of(p, w, n_tiles, rank);
          return pair_unit_of(p, w, n_tiles, rank);
        }
        const int2 rc = raster(p, w, n_tiles, p.n_col_tiles);
        return unit_of(p, rc.x, rc.y);
      };
      int stage = 0, slot = 0;
      uint32_t phase = 0;
      int64_t w = claim(-1);
      Unit next{};
      if (w < total) next = decode(w);
      while (w < total) {
        const Unit u = next;
        const int64_t n0 = int64_t{u.col} * OUT_COLS;
        const int64_t b0 = int64_t{u.expert} * p.b_rows + n0;
        // SwiGLU: gate rows n0.. and up rows I + n0.. of the expert; plain: 256 consecutive weight rows.
        const int32_t b_row0 = static_cast<int32_t>(b0);
        const int32_t b_row1 = static_cast<int32_t>(SWIGLU ? b0 + p.n : b0 + kBBoxRows);
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          mbar_wait(empty_bar + 8 * stage, phase ^ 1);
          const uint32_t full = full_bar + 8 * stage;
          if (kb == 0) {  // before the arrival that releases it to the consumers
            mailbox[slot] = make_int4(u.row0, u.rows, u.col, u.expert);
            slot = slot + 1 == kStages ? 0 : slot + 1;
          }
          const bool tall = u.rows > kBM;
          mbar_expect_tx(full, kATileBytes + kBTileBytes + (tall ? kTallTileBytes : 0));
          const uint32_t sa = tiles_base + stage * kStageBytes, sb = sa + kATileBytes;
          if (COLUMN_PAIRS && u.shared_a) {  // this CTA's 64 rows of the A tile, into both CTAs
            tma_load_2d_multicast(sa + rank * kSliceBytes, &map_a_half, kb * kBK,
                                  u.row0 + static_cast<int32_t>(rank) * 64, full, 0x3, a_policy);
          } else {
            tma_load_2d(sa, &map_a, kb * kBK, u.row0, full, a_policy);
          }
          if (tall) tma_load_2d(sb + kBTileBytes, &map_tall, kb * kBK, u.row0 + kBM, full, a_policy);
          if (PAIRS && u.shared_b) {  // this CTA's half of the weight tile, into both CTAs
            tma_load_2d_multicast(sb + rank * kBBoxBytes, &map_b, kb * kBK, rank == 0 ? b_row0 : b_row1, full, 0x3,
                                  b_policy);
          } else {
            tma_load_2d(sb, &map_b, kb * kBK, b_row0, full, b_policy);
            tma_load_2d(sb + kBBoxBytes, &map_b, kb * kBK, b_row1, full, b_policy);
          }
          if (++stage == kStages) stage = 0, phase ^= 1;
          // The next unit's claim and decode (an atomic and a few dependent loads of the tile map) while
          // the stages ahead are full.
          if (kb == 0) {
            w = claim(w);
            if (w < total) next = decode(w);
          }
        }
      }
      // A unit of no expert: the consumers stop.
      mbar_wait(empty_bar + 8 * stage, phase ^ 1);
      mailbox[slot] = make_int4(0, 0, 0, -1);
      mbar_arrive(full_bar + 8 * stage);
      if (p.claimed_units && rank == 0) {
        // The last claimer to finish leaves the queue zeroed for the next launch (which waits for this
        // grid to complete before it claims).
        __threadfence();
        if (atomicAdd(blocks_done, 1) == claimers - 1) {
          __threadfence();
          *next_unit = 0;
          *blocks_done = 0;
        }
      }
    } else if (STAGED && threadIdx.x >= 32) {
      // The store warps: the rows of each staged unit to C, masked to N, in 16-byte copies (launch_wgmma
      // stages only where N is a multiple of 8 and C 16-byte aligned).
      constexpr int kChunks = OUT_COLS / 8;  // 16-byte chunks of a staged row
      // Per unit: the consumers may write the buffer (the copy of the unit before is done), then they have.
      for (;;) {
        named_barrier_sync(kFreeBarrier, kHandoffThreads);
        named_barrier_sync(kStagedBarrier, kHandoffThreads);
        const int4 unit = *staged_unit;  // row0, rows (at most 128), col; expert -1: the end
        if (unit.w < 0) break;
        const int64_t n0 = int64_t{unit.z} * OUT_COLS;
        const int cols = static_cast<int>(min(int64_t{OUT_COLS}, p.n - n0));
        for (int i = threadIdx.x - 32; i < unit.y * kChunks; i += kStoreThreads) {
          const int r = i / kChunks, c = i % kChunks * 8;
          if (c >= cols) continue;
          *reinterpret_cast<uint4*>(p.c + (int64_t{unit.x} + r) * p.n + n0 + c) =
              *reinterpret_cast<const uint4*>(staging + r * kStagingRowBytes + c * 2);
        }
      }
      allow_dependent_launch();  // after this warp's last stores of C, as the consumers' call after theirs
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
    const int consumer = warpgroup - 1;            // rows 64 * consumer .. + 63 of the tile
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    // This warp is done with the stage: free it in this CTA (and in the peer, whose producer multicasts into
    // it: lane 1 arrives there in the same instruction as lane 0 here).
    const auto release = [&](int s) {
      if constexpr (PAIRS) {
        if (lane < 2) mbar_arrive_remote(peer_smem_addr(empty_bar + 8 * s, cluster_rank() ^ lane));
      } else {
        if (lane == 0) mbar_arrive(empty_bar + 8 * s);
      }
    };
    // STAGED: every consumer thread takes part in every unit's handoff (a masked warpgroup with no rows
    // too), so that each barrier completes once a unit. The buffer is free once the store warps are done
    // with the unit before and wait at the free barrier; they wait at the staged one next, so that the
    // consumers' sync there passes as soon as all consumers have written.
    const auto wait_for_buffer = [&] { named_barrier_sync(kFreeBarrier, kHandoffThreads); };
    const auto post_buffer = [&](int4 unit) {
      if (threadIdx.x == 128) *staged_unit = unit;
      named_barrier_sync(kStagedBarrier, kHandoffThreads);
    };
    int stage = 0;
    uint32_t phase = 0;
    float acc[128];
    float tall_acc[2][16];  // a tall tile's extra rows: [slice][weight row x extra row fragment]
    const int4* const mailbox = reinterpret_cast<const int4*>(p.scheduler + kMailboxOffset) + blockIdx.x * kMaxStages;
    for (int slot = 0;; slot = slot + 1 == kStages ? 0 : slot + 1) {
      mbar_wait(full_bar + 8 * stage, phase);
      const int4 posted = __ldcg(mailbox + slot);
      if (posted.w < 0) {  // the end (a real unit's expert is >= 0), which stops the store warps too
        if constexpr (STAGED) {
          wait_for_buffer();
          post_buffer(posted);
        }
        break;
      }
      const Unit u{.row0 = posted.x,
                   .rows = posted.y,
                   .col = posted.z,
                   .expert = posted.w,
                   .shared_b = false,
                   .shared_a = false};
      // The staged rows: the tile's (a tall tile's extra rows go to C from the consumers).
      const int4 staged = make_int4(u.row0, min(u.rows, kBM), u.col, u.expert);
      if ((p.half_tiles || u.rows == 0) && consumer * 64 >= u.rows) {
        // All of this warpgroup's rows are masked (half tiles; or a pair's lone tile): free each stage as it
        // lands (after it landed, so that the arrival counts towards this round of the empty barrier).
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          mbar_wait(full_bar + 8 * stage, phase);
          __syncwarp();  // every lane has read the mailbox before the stage (and so its slot) is freed
          release(stage);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        if constexpr (STAGED) {
          wait_for_buffer();
          post_buffer(staged);
        }
        continue;
      }
      // A tall tile: this warpgroup's two 64-row slices of the weight tile (SwiGLU: the gate and the up rows
      // of its 64 output columns, so that SwiGLU pairs registers of equal index; plain: its 128 columns)
      // times the extra rows. 128-byte rows: a 64-row slice is 8 KB on, 1024-byte aligned as the swizzle needs.
      const bool tall = u.rows > kBM;
      const uint32_t tall_w0 = consumer * (SWIGLU ? kSliceBytes : 2 * kSliceBytes);
      constexpr uint32_t kTallW1 = SWIGLU ? kBBoxBytes : kSliceBytes;  // the second slice, after the first
      // NOTE: one k-loop per kind of tile: a branch around some of the wgmmas inside the loop makes ptxas
      // serialise every wgmma of the kernel (C7520).
      const auto main_loop = [&]<bool TALL>() {
        int prev_stage = 0;
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          mbar_wait(full_bar + 8 * stage, phase);
          const uint32_t sa = tiles_base + stage * kStageBytes + consumer * kSliceBytes,
                         sb = tiles_base + stage * kStageBytes + kATileBytes, st = sb + kBTileBytes;
          wgmma_fence();
#pragma unroll
          for (int k16 = 0; k16 < kBK / 16; ++k16) {
            wgmma_m64n256k16(acc, smem_desc(sa + k16 * 32), smem_desc(sb + k16 * 32), kb > 0 || k16 > 0);
            if constexpr (TALL) {
              wgmma_m64n32k16(tall_acc[0], smem_desc(sb + tall_w0 + k16 * 32), smem_desc(st + k16 * 32),
                              kb > 0 || k16 > 0);
              wgmma_m64n32k16(tall_acc[1], smem_desc(sb + tall_w0 + kTallW1 + k16 * 32), smem_desc(st + k16 * 32),
                              kb > 0 || k16 > 0);
            }
          }
          wgmma_commit();
          // Keep this k-block's wgmmas in flight; the previous block's have retired, so free its stage.
          if (kb > 0) {
            wgmma_wait<1>();
            release(prev_stage);
          }
          prev_stage = stage;
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        wgmma_wait<0>();
        release(prev_stage);
      };
      if (tall) {
        main_loop.template operator()<true>();
      } else {
        main_loop.template operator()<false>();
      }

      // Epilogue. Accumulator j*4 + q of this thread: row 16 * warp + lane / 4 + 8 * (q / 2), column
      // 8 * j + 2 * (lane % 4) + q % 2 of the warpgroup's 64 x 256 block.
      const int64_t n0 = int64_t{u.col} * OUT_COLS;
      constexpr int OUT_J = OUT_COLS / 8;
      // The outputs of accumulators j*4 + 2*half and + 1 (SwiGLU: of those and their up columns).
      const auto out_pair = [&](int j, int half) {
        float v0 = acc[j * 4 + half * 2], v1 = acc[j * 4 + half * 2 + 1];
        if constexpr (SWIGLU) {
          const float u0 = acc[(j + OUT_J) * 4 + half * 2], u1 = acc[(j + OUT_J) * 4 + half * 2 + 1];
          v0 = swiglu(v0, u0);
          v1 = swiglu(v1, u1);
        }
        return __floats2bfloat162_rn(v0, v1);
      };
      if constexpr (STAGED) {
        // Every row and column: the store warps copy only the unit's rows, masked to N.
        wait_for_buffer();
        unsigned char* const out =
            staging + (consumer * 64 + warp * 16 + lane / 4) * kStagingRowBytes + (lane % 4) * 4;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
          for (int j = 0; j < OUT_J; ++j) {
            *reinterpret_cast<__nv_bfloat162*>(out + half * 8 * kStagingRowBytes + j * 16) = out_pair(j, half);
          }
        }
        post_buffer(staged);
      } else if (p.sector_stores) {
        // SECTOR STORES. Lanes 2m and 2m + 1 of a quad swap halves of their column pairs of output blocks j
        // and j + 1, so that each lane holds 4 adjacent columns of one block and the quad's four 8-byte stores
        // fill the row's 32-byte sector of the two blocks. NOTE: measured on the H200 (2026-12-01): with
        // 4-byte stores each sector took two half writes; now the down GEMM at DeepSeek-V3
        // T=8192 writes a third fewer L2 sectors and runs 3.45 -> 3.34 ms, the layer 1.4% faster; even
        // elsewhere (Qwen3 T=512 +0.8%).
        const bool odd = lane % 2 != 0;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int tile_r = consumer * 64 + warp * 16 + lane / 4 + half * 8;
          const bool row_valid = tile_r < u.rows;  // uniform over the quad: every lane takes part in the swaps
          bf16* out_row = p.c + (int64_t{u.row0} + tile_r) * p.n;
#pragma unroll
          for (int j = 0; j < OUT_J; j += 2) {
            const __nv_bfloat162 v0 = out_pair(j, half), v1 = out_pair(j + 1, half);
            const __nv_bfloat162 other = shfl_xor_bf162(odd ? v0 : v1, 1);
            // Even lane 2m: columns 4m..4m + 3 of block j; odd lane 2m + 1: the same columns of block j + 1.
            const int64_t column = n0 + (j + (odd ? 1 : 0)) * 8 + (lane % 4 / 2) * 4;
            const __nv_bfloat162 lo = odd ? other : v0, hi = odd ? v1 : other;
            if (row_valid && column < p.n) {  // N % 16 == 0: a group of 4 columns is all in or all out
              uint2 packed;
              packed.x = *reinterpret_cast<const uint32_t*>(&lo);
              packed.y = *reinterpret_cast<const uint32_t*>(&hi);
              *reinterpret_cast<uint2*>(out_row + column) = packed;
            }
          }
        }
      } else {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int tile_r = consumer * 64 + warp * 16 + lane / 4 + half * 8;
          if (tile_r >= u.rows) continue;
          const int64_t row = int64_t{u.row0} + tile_r;
          bf16* out_row = p.c + row * p.n;
#pragma unroll
          for (int j = 0; j < OUT_J; ++j) {
            const int64_t column = n0 + j * 8 + (lane % 4) * 2;
            const __nv_bfloat162 v = out_pair(j, half);
            if (column + 1 < p.n) {
              *reinterpret_cast<__nv_bfloat162*>(out_row + column) = v;
            } else if (column < p.n) {
              out_row[column] = v.x;
            }
          }
        }
      }
      if (tall) {
        // tall_acc[s][j*4 + q]: weight row w = 16 * warp + lane / 4 + 8 * (q / 2) of slice s, extra row
        // 8 * j + 2 * (lane % 4) + q % 2 (an output row past the tile's 128). The output column is
        // n0 + 64 * consumer + w for SwiGLU (both slices: gate and up of that column), else
        // n0 + 128 * consumer + 64 * s + w.
        const int tall_rows = u.rows - kBM;
#pragma unroll
        for (int j = 0; j < kTallRows / 8; ++j) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int x = j * 8 + (lane % 4) * 2 + q % 2, w = warp * 16 + lane / 4 + (q / 2) * 8;
            if (x >= tall_rows) continue;
            bf16* out_row = p.c + (int64_t{u.row0} + kBM + x) * p.n;
            if constexpr (SWIGLU) {
              const float g = tall_acc[0][j * 4 + q], up = tall_acc[1][j * 4 + q];
              const int64_t column = n0 + consumer * 64 + w;
              if (column < p.n) out_row[column] = __float2bfloat16_rn(swiglu(g, up));
            } else {
#pragma unroll
              for (int slice = 0; slice < 2; ++slice) {
                const int64_t column = n0 + consumer * 128 + slice * 64 + w;
                if (column < p.n) out_row[column] = __float2bfloat16_rn(tall_acc[slice][j * 4 + q]);
              }
            }
          }
        }
      }
    }
    allow_dependent_launch();
  }
  // No CTA of a pair exits while its peer may still arrive on its barriers.
  if constexpr (PAIRS) cluster_sync();
#else
  __trap();
#endif
}

}  // namespace

}  // namespace moe::cuda
