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
// Written from the PTX ISA (wgmma, cp.async.bulk.tensor, mbarrier); no code from other projects.
#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder is fetched through the runtime)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "launch.h"
#include "swiglu.cuh"
#include "moe/core/env.h"
#include "moe/cuda/check.h"
#include "moe/cuda/ops.h"

// NOTE: wgmma and setmaxnreg exist only on the sm_90a target; other targets get a kernel that traps, and
// the host refuses to launch it (wgmma_grouped_gemm_available()).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOE_WGMMA_DEVICE 1
#endif

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
constexpr int kTallRows = 32;                     // rows a tall tile holds past its 128 (wgmma N = 32)
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
// The policy stages the epilogue of GEMMs of at most this reduction length (wgmma_schedule_for).
constexpr int64_t kStagedMaxK = 1024;
// ... and those of at least this reduction length over half tiles.
constexpr int64_t kStagedMinHalfTileK = 4096;
// The policy runs column pairs in gate/up GEMMs of at least this reduction length (wgmma_schedule_for).
constexpr int64_t kColumnPairsMinK = 6144;
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

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// A named barrier (0 is __syncthreads) of `threads` threads, every thread of their warps taking part.
// NOTE: the unaligned form (barrier.sync, not bar.sync): the store warps and the consumers reach one
// barrier generation from different static instructions (their own branches, and the consumers from three
// call sites), which the aligned form forbids; compute-sanitizer synccheck reported it as "Divergent
// thread(s) in block" (17th session), and __syncwarp() before an aligned bar.sync did not clear it.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Spins until the phase of the given parity has completed. A fresh barrier counts its phase before
// phase 0 (parity 1) as complete, so the producer's first wait on each empty stage passes at once.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// An L2 cache policy for the TMA loads below: the eviction priority their lines get in L2.
__device__ __forceinline__ uint64_t l2_policy(WgmmaSchedule::L2Hint hint) {
  uint64_t policy;
  switch (hint) {
    case WgmmaSchedule::L2Hint::evict_last:
      asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
      break;
    case WgmmaSchedule::L2Hint::evict_first:
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
      break;
    default:
      asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  }
  return policy;
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int32_t col, int32_t row,
                                            uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar), "l"(policy)
      : "memory");
}

// The same load into this CTA and its cluster peers in cta_mask, at the same shared-memory offsets; each
// destination's mbarrier at `bar`'s offset receives the bytes that land there.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, int32_t col, int32_t row,
                                                      uint32_t bar, uint16_t cta_mask, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar), "h"(cta_mask), "l"(policy)
      : "memory");
}

__device__ __forceinline__ __nv_bfloat162 shfl_xor_bf162(__nv_bfloat162 v, int mask) {
  const uint32_t bits = __shfl_xor_sync(0xffffffffu, *reinterpret_cast<const uint32_t*>(&v), mask);
  return *reinterpret_cast<const __nv_bfloat162*>(&bits);
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// Every thread of the cluster: its shared memory and barriers are ready (release/acquire at cluster scope).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The address of the same shared-memory location in cluster CTA `rank`.
__device__ __forceinline__ uint32_t peer_smem_addr(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}
// NOTE: release at CTA scope, as a local arrival: what it orders is this warp's wgmma reads of its own stage
// (retired by wgmma.wait_group) before the peer's multicast overwrites it; a cluster-scope release would
// also wait for the warp's earlier global stores, in the middle of the k-loop.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}
// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle that TMA wrote: rows of 128
// bytes, 8-row groups 1024 bytes apart (stride byte offset); the leading byte offset is unused for this
// layout. The tile base must be 1024-byte aligned (base offset 0); a k16 slice starts 32 bytes further.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  uint64_t d = (addr & 0x3FFFF) >> 4;
  d |= uint64_t{1} << 16;            // leading byte offset (ignored), encoded 16 B
  d |= uint64_t{1024 >> 4} << 32;    // stride byte offset
  d |= uint64_t{1} << 62;            // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// d (+)= A[64 x 16] · B[256 x 16]ᵀ, both K-major in shared memory; scale_d = 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (+)= A[64 x 16] · B[32 x 16]ᵀ, both K-major in shared memory: a tall tile's weight rows (A) times its
// extra token rows (B); scale_d = 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
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
        // fill the row's 32-byte sector of the two blocks. NOTE: measured on the H200 (bench/RESULTS.md, 20th
        // session): with 4-byte stores each sector took two half writes; now the down GEMM at DeepSeek-V3
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

// MOE_WGMMA_SECTOR_STORES=on|off: the unstaged epilogue's sector-wide stores (on by default where N and C allow).
bool sector_stores_enabled() {
  static const bool on =
      env_on_off("MOE_WGMMA_SECTOR_STORES", "whether the wgmma epilogue stores 8 bytes a lane (a sector a quad)")
          .value_or(true);
  return on;
}

// cuTensorMapEncodeTiled from the driver through the runtime, so that nothing links libcuda.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    MOE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    MOE_CUDA_REQUIRE(found == cudaDriverEntryPointSuccess && fn != nullptr,
                     "the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12 driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A row-major bf16 matrix [rows, cols] read in boxes of box_rows x 64 with the 128-byte swizzle; reads
// past either edge return zeros.
CUtensorMap tensor_map(const bf16* base, int64_t rows, int64_t cols, int box_rows, const char* what) {
  MOE_CUDA_REQUIRE(cols % 8 == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0,
                   std::string("wgmma grouped GEMM: ") + what + " needs 16-byte aligned rows (columns " +
                       std::to_string(cols) + " must be a multiple of 8)");
  MOE_CUDA_REQUIRE(rows >= 1 && rows < (int64_t{1} << 31),
                   std::string("wgmma grouped GEMM: ") + what + " rows " + std::to_string(rows) + " out of range");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(bf16)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims,
                                          strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MOE_CUDA_REQUIRE(r == CUDA_SUCCESS, std::string("wgmma grouped GEMM: cuTensorMapEncodeTiled failed for ") + what +
                                          " (error " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

int sm_count() {
  int device = 0, sms = 0;
  MOE_CUDA_CHECK(cudaGetDevice(&device));
  MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// One kernel instance: its shared-memory limit raised once per device, a grid of at most one block per SM
// (PAIRS: the clusters of 2 that fit at once, as the persistent blocks never make room for more).
template <bool SWIGLU, bool PAIRS, bool STAGED, bool COLUMN_PAIRS>
void launch_instance(const CUtensorMap& map_a, const CUtensorMap& map_b, const CUtensorMap& map_tall,
                     const CUtensorMap& map_a_half, const WgmmaParams& p, int64_t max_tiles,
                     cudaStream_t stream) {
  static_assert(PAIRS || !COLUMN_PAIRS, "column pairs are clusters of 2 (PAIRS)");
  constexpr auto kernel = wgmma_grouped_gemm_kernel<SWIGLU, PAIRS, STAGED, COLUMN_PAIRS>;
  constexpr size_t kSmemBytes = smem_bytes(SWIGLU, STAGED);
  static std::atomic<int> clusters_by_device[64]{};
  int device = 0;
  MOE_CUDA_CHECK(cudaGetDevice(&device));
  if (raise_shared_memory_once<kernel>(kSmemBytes) && PAIRS) {
    const int clusters =
        max_active_clusters(kernel, static_cast<unsigned>(sm_count() / 2 * 2), dim3(kThreads), kSmemBytes, 2);
    MOE_CUDA_REQUIRE(clusters >= 1, "wgmma grouped GEMM: no cluster of 2 blocks fits on this GPU");
    clusters_by_device[device % 64].store(clusters);
  }
  // Upper bounds on the units: the device knows the real counts.
  // NOTE: the claim counter is int32 and every block claims once past the end.
  MOE_CUDA_REQUIRE(max_tiles * p.n_col_tiles + kMaxBlocks < (int64_t{1} << 31), "wgmma grouped GEMM: too many work units");
  if constexpr (PAIRS) {
    const int64_t units =
        COLUMN_PAIRS ? max_tiles * ((p.n_col_tiles + 1) / 2) : (max_tiles + 1) / 2 * p.n_col_tiles;
    const int64_t clusters = std::min<int64_t>({int64_t{clusters_by_device[device % 64].load()}, units,
                                                int64_t{kMaxBlocks / 2}});
    launch_dependent_clusters(kernel, dim3(static_cast<unsigned>(2 * clusters)), dim3(kThreads), kSmemBytes,
                              stream, 2, map_a, map_b, map_tall, map_a_half, p);
  } else {
    const int64_t units = max_tiles * p.n_col_tiles;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>({int64_t{sm_count()}, units, int64_t{kMaxBlocks}}));
    launch_dependent(kernel, dim3(blocks), dim3(kThreads), kSmemBytes, stream, map_a, map_b, map_tall,
                     map_a_half, p);
  }
}

template <bool SWIGLU>
void launch_wgmma(const GroupedGemmArgs& g, WgmmaSchedule schedule, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(wgmma_grouped_gemm_available(),
                   "wgmma grouped GEMM: needs a build for sm_90a and a compute capability 9.0 GPU");
  MOE_CUDA_REQUIRE(g.gather == nullptr, "wgmma grouped GEMM: A must be contiguous rows (gather them first)");
  MOE_CUDA_REQUIRE(g.n_experts >= 1 && g.a_rows >= 1,
                   "wgmma grouped GEMM: set n_experts and a_rows (the tensor maps' extents)");
  MOE_CUDA_REQUIRE(g.n % 2 == 0, "wgmma grouped GEMM: output columns " + std::to_string(g.n) + " must be even");
  MOE_CUDA_REQUIRE(g.k >= 1 && g.n >= 1, "wgmma grouped GEMM: empty K or N");
  MOE_CUDA_REQUIRE(g.max_tiles < (int64_t{1} << 31), "wgmma grouped GEMM: too many tiles");
  MOE_CUDA_REQUIRE(schedule.raster_rows >= 1, "wgmma grouped GEMM: raster_rows must be at least 1");
  MOE_CUDA_REQUIRE(g.scheduler != nullptr,
                   "wgmma grouped GEMM: set scheduler (wgmma_scheduler_ints() zeroed ints of device memory)");
  if (g.max_tiles == 0) return;
  constexpr int OUT_COLS = SWIGLU ? kBN / 2 : kBN;
  const int64_t b_rows = SWIGLU ? 2 * g.n : g.n;
  MOE_CUDA_REQUIRE(g.tall_rows == 0 || g.tall_rows == kTallRows,
                   "wgmma grouped GEMM: tall_rows " + std::to_string(g.tall_rows) + " must be 0 or " +
                       std::to_string(kTallRows) + " (build the tile map with wgmma_tall_rows())");
  // The staged epilogue's store warps copy 16-byte vectors: elsewhere the consumers store (N even suffices).
  if (g.n % 8 != 0 || reinterpret_cast<uintptr_t>(g.c) % 16 != 0) schedule.staged_epilogue = false;
  const CUtensorMap map_a = tensor_map(g.a, g.a_rows, g.k, kBM, "A");
  const CUtensorMap map_tall = tensor_map(g.a, g.a_rows, g.k, kTallRows, "A (tall tiles' extra rows)");
  MOE_CUDA_REQUIRE(!(schedule.pairs && schedule.column_pairs),
                   "wgmma grouped GEMM: pairs of row tiles and column pairs exclude each other");
  // Column pairs: each block of a cluster loads 64 of the A tile's rows for both.
  const CUtensorMap map_a_half =
      schedule.column_pairs ? tensor_map(g.a, g.a_rows, g.k, kBM / 2, "A (column pairs' halves)") : map_a;
  const CUtensorMap map_b = tensor_map(g.b, g.n_experts * b_rows, g.k, kBBoxRows, "B");
  const WgmmaParams p{.segment_offsets = g.segment_offsets, .segment_counts = g.segment_counts,
                      .tile_expert = g.tile_expert, .tile_row = g.tile_row, .n_tiles = g.n_tiles, .c = g.c,
                      .n = g.n, .b_rows = b_rows, .k_blocks = static_cast<int32_t>((g.k + kBK - 1) / kBK),
                      .n_col_tiles = static_cast<int32_t>((g.n + OUT_COLS - 1) / OUT_COLS),
                      .max_tiles = static_cast<int32_t>(g.max_tiles), .tall_rows = g.tall_rows,
                      .raster_rows = schedule.raster_rows,
                      .half_tiles = schedule.half_tiles, .a_hint = schedule.a_hint, .b_hint = schedule.b_hint,
                      .claimed_units = schedule.claimed_units,
                      .sector_stores = g.n % 16 == 0 && reinterpret_cast<uintptr_t>(g.c) % 32 == 0 &&
                                       sector_stores_enabled(),
                      .scheduler = g.scheduler};
  const auto launch = [&]<bool PAIRS, bool COLUMN_PAIRS>() {
    if (schedule.staged_epilogue) {
      launch_instance<SWIGLU, PAIRS, true, COLUMN_PAIRS>(map_a, map_b, map_tall, map_a_half, p, g.max_tiles,
                                                         stream);
    } else {
      launch_instance<SWIGLU, PAIRS, false, COLUMN_PAIRS>(map_a, map_b, map_tall, map_a_half, p, g.max_tiles,
                                                          stream);
    }
  };
  if (schedule.column_pairs) {
    launch.template operator()<true, true>();
  } else if (schedule.pairs) {
    launch.template operator()<true, false>();
  } else {
    launch.template operator()<false, false>();
  }
}

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
// 0.12 GB, 291 us (Qwen3 T=8192: 108 -> 84 us; ncu, bench/RESULTS.md, 21st session).
// The stores are evict-first, so that x stays in L2 while the rows stream out.
// NOTE: at Qwen3 T=8192 (268 MB of rows from a 34 MB x) the plain stores evicted x: 160 MB of DRAM reads
// besides the 242 MB written, 110 us (bench/RESULTS.md, 11th session).
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

}  // namespace

int64_t wgmma_scheduler_ints() { return kSchedulerInts; }

int wgmma_tall_rows() {
  // NOTE: measured on the H200 (bench/RESULTS.md, 8th session), with the raster policy below: Mixtral T=1024
  // 1.47 -> 1.34-1.39 ms, DeepSeek-V3 T=8192 13.3 -> 12.7 ms, even elsewhere. MOE_WGMMA_TALL=on|off overrides.
  static const bool tall = env_on_off("MOE_WGMMA_TALL", "whether an expert's last wgmma tile takes up to 32 more rows")
                               .value_or(true);
  return tall ? kTallRows : 0;
}

bool wgmma_even_tiles(int64_t rows, int64_t n_experts) {
  // NOTE: measured on the H200 (bench/RESULTS.md, 8th session): a third of DeepSeek-V3 T=8192's pairs
  // straddled two experts and read each weight tile twice; even tiles 12.5 -> 11.8 ms, even elsewhere.
  // MOE_WGMMA_EVEN_TILES=on|off overrides.
  static const std::optional<bool> forced =
      env_on_off("MOE_WGMMA_EVEN_TILES", "whether an expert's odd tile count gets an empty tile to pair");
  return forced.value_or(wgmma_schedule_for(rows, n_experts, true, /*k: pairs do not depend on it*/ 0).pairs);
}

bool wgmma_grouped_gemm_available() {
#ifdef MOE_CUDA_SM90A
  static const bool available = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return major == 9 && minor == 0;
  }();
  return available;
#else
  return false;
#endif
}

namespace {

// An environment setting of one value or two separated by a comma ("a,b"); one value stands for both.
struct EnvPair {
  std::string text, first, second;
  bool paired;  // the text had a comma
};
// `name`'s value split at its first comma, or nullopt where it is unset or empty.
std::optional<EnvPair> env_pair(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  const std::string s = v;
  const size_t comma = s.find(',');
  if (comma == std::string::npos) return EnvPair{s, s, s, false};
  return EnvPair{s, s.substr(0, comma), s.substr(comma + 1), true};
}

}  // namespace

WgmmaSchedule wgmma_schedule_for(int64_t rows, int64_t n_experts, bool gate_up, int64_t k,
                                 std::optional<bool> tuned_staged_epilogue) {
  // NOTE: measured on the H200 (bench/RESULTS.md, 2026-11-29, wgmma iteration 2): half tiles took
  // DeepSeek-V3 T=1024 (32 rows per expert, nearly every tile a half tile) from 6.53 to 5.92 ms, but made
  // T=8192 (256 rows per expert, a fifth of the tiles half) 23% slower: blocks that finish half tiles early
  // drift out of step with the blocks that read the same expert's weight tiles, which then come from
  // memory more than once. So half tiles only where nearly every tile is one. At 64 rows per expert (half of
  // the tiles half; 8th session, with tall tiles) they measured 1.5-4% faster: Qwen3 T=1024 426 -> 420 us,
  // Mixtral T=256 832 -> 806 us, DeepSeek-V3 T=2048 6.72 -> 6.45 ms.
  // NOTE: the gathered A rows of a row tile are read by all its column tiles (16 blocks for DeepSeek-V3's
  // gate/up GEMM), which drift apart by more than the L2 holds while the weights stream through it, so
  // without a hint A came from DRAM once per column tile (bench/RESULTS.md, 3rd session: the GEMMs read
  // weights + A x column tiles). Evict-last keeps A in L2 ahead of the weight stream.
  // NOTE: pairs (clusters of 2 sharing weight tiles) measured (bench/RESULTS.md, 5th session) 3% faster on
  // Mixtral T=8192 (2048 rows per expert), 1% on DeepSeek-V3 T=8192 (256), even on Qwen3 T=8192 (512) and
  // Mixtral T=1024 (256), and 3-7% slower at 32-64 rows per expert (DeepSeek-V3 and Qwen3 T=1024), where
  // most pairs hold a half-empty tile or straddle two experts and load alone but still run in lock step.
  const bool small_experts = rows <= 64 * n_experts;  // at most 64 rows an expert: nearly every tile a half tile
  WgmmaSchedule schedule{.half_tiles = small_experts, .a_hint = WgmmaSchedule::L2Hint::evict_last,
                         .claimed_units = true, .pairs = rows >= 256 * n_experts};
  // NOTE: raster groups with pairs, measured on the H200 with tall tiles (bench/RESULTS.md, 8th session): a
  // group as high as an expert's pairs (1 at 256 rows per expert, 8 at 2048) keeps the pairs that share its
  // weight tiles together and the fewest gathered rows in flight: DeepSeek-V3 T=8192 13.9 -> 12.85 ms with
  // 1 for gate/up and 4 for down; the down GEMM (short k-loops) does better with at least 4.
  // NOTE: the staged epilogue, measured on the H200 (bench/RESULTS.md, 9th session): with 12 k-blocks a unit
  // (Qwen3's down GEMM, K = 768) it took the GEMM from 454 to 377 us at T=8192 (tensor pipe 51 -> 62% busy);
  // with 32 or more k-blocks and 128-row tiles its pipeline of 3 stages instead of 4 lost more than the
  // overlap gave (Qwen3 T=8192's gate/up 705 -> 734 us, DeepSeek-V3 T=8192's GEMMs 3-10%, Mixtral T=1024's
  // 4-12%, Mixtral T=512 +4%). But at <= 64 rows an expert and long k-loops the 3 stages pay: Mixtral T=128
  // 808 -> 748 us (K = 4096 and 14336; its down GEMM 289 -> 242 us, 3.3 -> 3.9 TB/s in ncu), T=256 801 -> 764,
  // DeepSeek-V3 T=1024 and 2048 (7168 and 2048) -0.5 and -0.9%; Qwen3 T=1024 (gate/up K = 2048) +0.5%, so
  // not below kStagedMinHalfTileK. There the gain is the shallower pipeline, not the overlap: a test build
  // with 3 stages and the plain epilogue ran Mixtral T=128 in 756 us, with 2 stages 935 (4 stages: 816).
  schedule.staged_epilogue =
      tuned_staged_epilogue.value_or(k <= kStagedMaxK || (small_experts && k >= kStagedMinHalfTileK));
  // NOTE: column pairs (each A tile read from L2 once per two column tiles), measured on the H200
  // (bench/RESULTS.md, 23rd session) where tiles are mostly full but an expert has too few rows for pairs of
  // row tiles: DeepSeek-V3 T=4096's gate/up GEMM (K = 7168, L2 97% busy) 4.85 -> 4.48 ms under ncu, its
  // L2-to-SM sectors -15%, the layer -1.5 to -2.5%; in the down GEMMs 1.5-3% slower (two blocks in lock step
  // over shorter units), and in gate/up GEMMs of shorter K even or worse (Qwen3 T=2048, K = 2048: -0.6 to
  // +0.4%; Mixtral T=512, K = 4096: +0.4 to +1.4%). So gate/up from kColumnPairsMinK only.
  schedule.column_pairs = gate_up && k >= kColumnPairsMinK && !small_experts && !schedule.pairs;
  if (schedule.pairs) {
    const int pairs_per_expert = static_cast<int>(std::clamp<int64_t>(rows / (256 * n_experts), 1, 8));
    schedule.raster_rows = gate_up ? pairs_per_expert : std::max(4, pairs_per_expert);
  }
  // MOE_WGMMA_HALF_TILES (on/off), MOE_WGMMA_RASTER_ROWS (N or <gate/up N>,<down N>), MOE_WGMMA_L2
  // (<A>,<B>: normal, last or first), MOE_WGMMA_CLAIM, MOE_WGMMA_PAIRS (on/off), MOE_WGMMA_COLUMN_PAIRS (not
  // with pairs) and MOE_WGMMA_STAGED_EPILOGUE (on/off, or <gate/up>,<down>) override the policy, for
  // measuring the choices against each other in one device run (scripts/device/wgmma_schedules.sh).
  static const std::optional<bool> half =
      env_on_off("MOE_WGMMA_HALF_TILES", "whether a tile of <= 64 rows runs on one consumer warpgroup");
  // MOE_WGMMA_RASTER_ROWS: N for both GEMMs, or <gate/up>,<down>.
  static const std::pair<int, int> raster_rows = [] {  // 0: the policy's
    const std::optional<EnvPair> v = env_pair("MOE_WGMMA_RASTER_ROWS");
    if (!v) return std::pair{0, 0};
    const auto rows = [&](const std::string& r) {
      int n = 0;
      const auto [end, error] = std::from_chars(r.data(), r.data() + r.size(), n);
      if (error != std::errc() || end != r.data() + r.size()) n = 0;
      MOE_CUDA_REQUIRE(n >= 1 && n <= 64,
                       "MOE_WGMMA_RASTER_ROWS must be N or <gate/up N>,<down N>, each 1 to 64, not '" + v->text + "'");
      return n;
    };
    return std::pair{rows(v->first), rows(v->second)};
  }();
  static const std::pair<int, int> l2 = [] {  // -1: the policy's
    const std::optional<EnvPair> v = env_pair("MOE_WGMMA_L2");
    if (!v) return std::pair{-1, -1};
    const std::string wanted =
        "MOE_WGMMA_L2 must be <A hint>,<B hint>, each normal, last or first, not '" + v->text + "'";
    const auto hint = [&](const std::string& h) {
      MOE_CUDA_REQUIRE(h == "normal" || h == "last" || h == "first", wanted);
      return h == "normal" ? 0 : h == "last" ? 1 : 2;
    };
    MOE_CUDA_REQUIRE(v->paired, wanted);
    return std::pair{hint(v->first), hint(v->second)};
  }();
  static const std::optional<bool> claim =
      env_on_off("MOE_WGMMA_CLAIM", "whether blocks claim work units from a queue or walk a fixed stride");
  static const std::optional<bool> pairs =
      env_on_off("MOE_WGMMA_PAIRS", "whether clusters of 2 blocks share weight tiles by TMA multicast");
  // MOE_WGMMA_STAGED_EPILOGUE and MOE_WGMMA_COLUMN_PAIRS: on|off for both GEMMs, or <gate/up>,<down>.
  const auto per_gemm_on_off = [](const char* name, const char* meaning) {
    const std::optional<EnvPair> v = env_pair(name);
    if (!v) return std::pair<std::optional<bool>, std::optional<bool>>{};
    const auto on_off = [&](const std::string& x) {
      MOE_CUDA_REQUIRE(x == "on" || x == "off", std::string(name) + " (" + meaning + ") must be on, off or " +
                                                    "<gate/up>,<down> of those, not '" + v->text + "'");
      return std::optional<bool>(x == "on");
    };
    return std::pair{on_off(v->first), on_off(v->second)};
  };
  static const std::pair<std::optional<bool>, std::optional<bool>> staged =
      per_gemm_on_off("MOE_WGMMA_STAGED_EPILOGUE",
                      "whether store warps write a unit's output while the next unit's k-loop runs");
  static const std::pair<std::optional<bool>, std::optional<bool>> column_pairs =
      per_gemm_on_off("MOE_WGMMA_COLUMN_PAIRS",
                      "whether clusters of 2 blocks on two column tiles share the A tile by TMA multicast");
  schedule.half_tiles = half.value_or(schedule.half_tiles);
  schedule.claimed_units = claim.value_or(schedule.claimed_units);
  schedule.pairs = pairs.value_or(schedule.pairs);
  schedule.column_pairs =
      (gate_up ? column_pairs.first : column_pairs.second).value_or(schedule.column_pairs) && !schedule.pairs;
  schedule.staged_epilogue = (gate_up ? staged.first : staged.second).value_or(schedule.staged_epilogue);
  if (l2.first >= 0) {
    schedule.a_hint = static_cast<WgmmaSchedule::L2Hint>(l2.first);
    schedule.b_hint = static_cast<WgmmaSchedule::L2Hint>(l2.second);
  }
  const int forced_raster = gate_up ? raster_rows.first : raster_rows.second;
  if (forced_raster > 0) schedule.raster_rows = forced_raster;
  return schedule;
}

void wgmma_grouped_gemm_swiglu(const GroupedGemmArgs& args, cudaStream_t stream, WgmmaSchedule schedule) {
  launch_wgmma<true>(args, schedule, stream);
}
void wgmma_grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream, WgmmaSchedule schedule) {
  launch_wgmma<false>(args, schedule, stream);
}
void wgmma_grouped_gemm_swiglu(const GroupedGemmArgs& args, cudaStream_t stream) {
  wgmma_grouped_gemm_swiglu(args, stream,
                            wgmma_schedule_for(args.a_rows, args.n_experts, true, args.k, args.staged_epilogue));
}
void wgmma_grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream) {
  wgmma_grouped_gemm(args, stream,
                     wgmma_schedule_for(args.a_rows, args.n_experts, false, args.k, args.staged_epilogue));
}

std::optional<GroupedGemmKernel> forced_grouped_gemm_kernel() {
  static const std::optional<GroupedGemmKernel> forced = []() -> std::optional<GroupedGemmKernel> {
    const char* v = std::getenv("MOE_GROUPED_GEMM");
    if (v == nullptr || *v == '\0') return std::nullopt;
    const std::string s(v);
    MOE_CUDA_REQUIRE(s == "mma" || s == "wgmma", "MOE_GROUPED_GEMM must be mma or wgmma, not '" + s + "'");
    return s == "mma" ? GroupedGemmKernel::mma : GroupedGemmKernel::wgmma;
  }();
  return forced;
}

GroupedGemmKernel grouped_gemm_kernel_for(int tile_rows) {
  if (forced_grouped_gemm_kernel() == GroupedGemmKernel::mma || !wgmma_grouped_gemm_available())
    return GroupedGemmKernel::mma;
  // NOTE: measured on the H200 (bench/RESULTS.md, 2026-11-29): wgmma with 128-row tiles beats the mma.sync
  // kernels in both prefill buckets, also at 32 rows per expert (DeepSeek-V3 T=1024: 8.98 -> 6.15 ms) where
  // three quarters of each tile are masked rows; decode (16-row tiles) stays a weight stream on mma.sync.
  // NOTE: at 9-16 rows an expert, the 32-row mma.sync tiles over 128 weight rows (15th session) beat wgmma
  // at every expert count measured (bench/RESULTS.md: DeepSeek-V3 T=512 5,689 -> 5,450 us, Qwen3 T=256
  // 347 -> 331, OLMoE T=128 239 -> 229 against the 16-row tiles the tuned table had picked there); the old
  // 32-row tiles had lost to wgmma where experts are many. 48-row mma.sync tiles at 17-32 rows an expert beat it
  // with balanced routing and lost by 12-34% with skewed routing (16th session; see Mid48 in grouped_gemm.cu).
  return tile_rows >= 64 ? GroupedGemmKernel::wgmma : GroupedGemmKernel::mma;
}

namespace {

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
