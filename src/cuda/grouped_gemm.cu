// Grouped GEMMs over expert segments with bf16 tensor-core MMA (mma.sync m16n8k16, fp32 accumulation),
// a multi-stage cp.async pipeline and XOR-swizzled shared memory for conflict-free ldmatrix.
// Each block computes one tile: BM rows of one expert's segment (from the device tile map) times BN
// weight rows. Rows of A may be gathered through a row map (the permute's row_token), so the gather of
// the tokens happens in the GEMM's loads. The SwiGLU variant loads gate and up weight rows side by side
// for every warp, so silu(gate) * up is formed in registers in the epilogue.
// The FP8 variant (W8A8, DeepSeek-V3's block scaling) runs the same tiles on e4m3 bytes with the m16n8k32
// e4m3 mma: each 128-value k group is summed apart and added to the accumulators times its row's activation
// scale and its weight block's scale.
#include <cuda_bf16.h>


#include "launch.h"
#include "mma.cuh"
#include "swiglu.cuh"
#include "core/knobs.h"
#include "cuda/check.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int TM = BM / WARPS_M, TN = BN / WARPS_N;  // warp tile
  static constexpr int MI = TM / 16, NI = TN / 8;             // mma tiles per warp
  static constexpr int CHUNKS = BK / 8;                       // 16-byte chunks per smem row
  static constexpr int ROWS_PER_LINE = BK * 2 >= 128 ? 1 : 128 / (BK * 2);
  static constexpr int STAGE_ELEMS = (BM + BN) * BK;
  static constexpr size_t SMEM_BYTES = size_t{STAGES} * STAGE_ELEMS * sizeof(bf16);
  static_assert(TM % 16 == 0 && TN % 16 == 0 && BK % 16 == 0, "warp tiles must hold whole mma tiles");
};

// NOTE: the 16-byte chunk c of smem row r lives at c ^ ((r / ROWS_PER_LINE) % CHUNKS): the 8 rows an
// ldmatrix phase reads then fall into 8 distinct bank groups.
template <class C>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * C::BK + ((chunk ^ ((row / C::ROWS_PER_LINE) % C::CHUNKS)) * 8);
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: zero-fill (rows past the segment, columns past N)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Weight row held by smem B row j. Plain: n0 + j. SwiGLU: each warp's TN rows are TN/2 gate rows followed
// by the TN/2 up rows of the same output columns.
template <class C, bool SWIGLU>
__device__ __forceinline__ int64_t weight_row(int j, int64_t n0, int64_t n, bool& valid) {
  if constexpr (!SWIGLU) {
    valid = n0 + j < n;
    return n0 + j;
  } else {
    const int warp_n = j / C::TN, within = j % C::TN, half = C::TN / 2;
    const int64_t column = n0 + warp_n * half + (within < half ? within : within - half);
    valid = column < n;
    return within < half ? column : n + column;
  }
}

constexpr int kRasterRows = 8;  // row tiles per raster group

// SETTLED_MAP (GroupedGemmArgs::tile_map_settled): the tile map and segment arrays are read, and the weight
// (B) loads of the first STAGES - 1 k-steps issued, before the grid wait; only the loads of A follow it.
// NOTE: why that is safe for the down GEMM. Its tile map comes from the permute, two launches back. The gate/up
// GEMM's blocks all pass their grid wait (the permute complete, its writes visible) before they call
// allow_dependent_launch or exit, and the down grid is launched only after every one of them has done so:
// the permute's writes are in L2 before any down block runs. They are read with __ldcg (L2, not the SM's
// non-coherent L1). The weights are written by no kernel of the forward. A, the gate/up GEMM's output, is the
// only input that needs the wait. Not for the gate/up GEMM itself: its tile map is the permute's output.
// FP8: a and b hold e4m3 bytes, read as bf16-sized pairs (k counts pairs: 64 of them are one 128-value scale
// group; mma_e4m3's fragments sit where mma_bf16's do, so loads, swizzle and ldmatrix are the bf16 ones);
// a_scale [a's rows, k / 64] per row and group, b_scale [mats, ceil(n / 128), k / 64] per 128x128 weight
// block (SwiGLU: mats = 2E, gate and up apart).
template <class C, bool SWIGLU, bool SETTLED_MAP, bool FP8>
static __global__ void __launch_bounds__(C::THREADS)
    grouped_gemm_kernel(const bf16* __restrict__ a, const int32_t* __restrict__ gather, const bf16* __restrict__ b,
                        bf16* __restrict__ c, const int32_t* __restrict__ segment_offsets,
                        const int32_t* __restrict__ segment_counts, const int32_t* __restrict__ tile_expert,
                        const int32_t* __restrict__ tile_row, const int32_t* __restrict__ n_tiles, int64_t k,
                        int64_t n, int64_t max_tiles, int64_t n_col_tiles, bool early_dependent_launch,
                        const float* __restrict__ a_scale, const float* __restrict__ b_scale) {
  // NOTE: blocks walk kRasterRows row tiles across every column tile before moving on, so that the row
  // tiles (gathered tokens) stay in L2 for all column tiles, and the row tiles of one expert read its weight
  // slice together. Launch order of (row tile fastest, column tile) re-read the rows from DRAM per column
  // tile: ncu showed 34 GB of DRAM traffic in one DeepSeek-V3 T=8192 gate/up GEMM.
  const int64_t linear = blockIdx.x, group_span = int64_t{kRasterRows} * n_col_tiles;
  const int64_t group = linear / group_span, within = linear % group_span;
  const int64_t group_rows = min(int64_t{kRasterRows}, max_tiles - group * kRasterRows);
  const int64_t tile = group * kRasterRows + within % group_rows, col_tile = within / group_rows;
  auto map = [](const int32_t* p) { return SETTLED_MAP ? __ldcg(p) : *p; };
  if constexpr (!SETTLED_MAP) wait_for_prior_grids();  // the tile map and the rows come from the kernels before
  // NOTE: early_dependent_launch (GroupedGemmArgs): the gate/up GEMM lets the down GEMM launch here, after
  // its grid wait (which SETTLED_MAP relies on), so that down blocks take the SMs its last wave leaves and
  // stream their first weight stages while it finishes: 1.5-2.4 us a layer at Qwen3 T = 16..128, 4-6 us at
  // Mixtral T = 16, 32. The early launch alone, or the early weight stages alone, gained nothing
  // (H200, 2026-11-30). Waiting down blocks cannot starve this grid: every block of it
  // has started once all have passed this point.
  if (early_dependent_launch) allow_dependent_launch();
  if (tile >= map(n_tiles)) return;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);

  const int expert = map(tile_expert + tile);
  const int64_t row0 = map(tile_row + tile);
  const int64_t row_end = int64_t{map(segment_offsets + expert)} + map(segment_counts + expert);
  constexpr int OUT_COLS = SWIGLU ? C::BN / 2 : C::BN;  // output columns per block
  const int64_t n0 = col_tile * OUT_COLS;
  const int64_t b_rows = SWIGLU ? 2 * n : n;
  const bf16* b_expert = b + int64_t{expert} * b_rows * k;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp / C::WARPS_N, warp_n = warp % C::WARPS_N;

  // Each thread copies fixed 16-byte chunks of every stage: its rows are resolved once.
  constexpr int A_CHUNKS = C::BM * C::CHUNKS, B_CHUNKS = C::BN * C::CHUNKS;
  constexpr int A_ITERS = (A_CHUNKS + C::THREADS - 1) / C::THREADS;
  constexpr int B_ITERS = (B_CHUNKS + C::THREADS - 1) / C::THREADS;
  const bf16* a_src[A_ITERS];
  bool a_valid[A_ITERS];
  for (int i = 0; i < A_ITERS; ++i) {
    const int chunk = tid + i * C::THREADS, r = chunk / C::CHUNKS;
    const int64_t row = row0 + r;
    a_valid[i] = chunk < A_CHUNKS && row < row_end;
    const int64_t source = a_valid[i] ? (gather ? int64_t{map(gather + row)} : row) : 0;
    a_src[i] = a + source * k + (chunk % C::CHUNKS) * 8;
  }
  const bf16* b_src[B_ITERS];
  bool b_valid[B_ITERS];
  for (int i = 0; i < B_ITERS; ++i) {
    const int chunk = tid + i * C::THREADS, j = chunk / C::CHUNKS;
    bool valid = false;
    const int64_t wrow = chunk < B_CHUNKS ? weight_row<C, SWIGLU>(j, n0, n, valid) : 0;
    b_valid[i] = valid && chunk < B_CHUNKS;
    b_src[i] = b_expert + (b_valid[i] ? wrow : 0) * k + (chunk % C::CHUNKS) * 8;
  }

  auto load_a = [&](int stage, int64_t k0) {
    bf16* sa = smem + stage * C::STAGE_ELEMS;
    for (int i = 0; i < A_ITERS; ++i) {
      const int chunk = tid + i * C::THREADS;
      if (chunk < A_CHUNKS) cp_async_16(sa + swizzle<C>(chunk / C::CHUNKS, chunk % C::CHUNKS), a_src[i] + k0, a_valid[i]);
    }
  };
  auto load_b = [&](int stage, int64_t k0) {
    bf16* sb = smem + stage * C::STAGE_ELEMS + C::BM * C::BK;
    for (int i = 0; i < B_ITERS; ++i) {
      const int chunk = tid + i * C::THREADS;
      if (chunk < B_CHUNKS) cp_async_16(sb + swizzle<C>(chunk / C::CHUNKS, chunk % C::CHUNKS), b_src[i] + k0, b_valid[i]);
    }
  };

  float acc[C::MI][C::NI][4] = {};
  const int k_tiles = static_cast<int>(k / C::BK);

  // FP8: the scales of the thread's accumulator rows (null past the segment: those rows are never stored)
  // and of the warp's weight block. NOTE: a warp's output columns lie in one 128-row weight block, since
  // blocks start at multiples of OUT_COLS, which divides 128.
  constexpr int KK_PER_GROUP = FP8 ? 64 / 16 : C::BK / 16, GROUPS = C::BK / 16 / KK_PER_GROUP;
  static_assert(!FP8 || (C::BK % 64 == 0 && 128 % OUT_COLS == 0), "fp8 tiles: whole scale groups and blocks");
  const int64_t k_groups = k / 64;
  const float* a_scale_row[C::MI][2] = {};
  const float *b_scale_gate = nullptr, *b_scale_up = nullptr;
  if constexpr (FP8) {
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = row0 + warp_m * C::TM + mi * 16 + lane / 4 + half * 8;
        if (row < row_end) a_scale_row[mi][half] = a_scale + (gather ? int64_t{map(gather + row)} : row) * k_groups;
      }
    const int64_t n_blocks = (n + 127) / 128;
    const int64_t block = min((n0 + warp_n * (SWIGLU ? C::TN / 2 : C::TN)) / 128, n_blocks - 1);
    b_scale_gate = b_scale + ((SWIGLU ? 2 * int64_t{expert} : int64_t{expert}) * n_blocks + block) * k_groups;
    b_scale_up = SWIGLU ? b_scale_gate + n_blocks * k_groups : b_scale_gate;
  }
  if constexpr (SETTLED_MAP) {
    // The prologue's B loads go out uncommitted, so they join the first group (with A's stage 0): the main
    // loop's wait for group 0 covers them, and the group count stays that of the plain prologue.
    for (int s = 0; s < C::STAGES - 1; ++s)
      if (s < k_tiles) load_b(s, int64_t{s} * C::BK);
    wait_for_prior_grids();  // A comes from the kernel before
  }
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < k_tiles) {
      load_a(s, int64_t{s} * C::BK);
      if constexpr (!SETTLED_MAP) load_b(s, int64_t{s} * C::BK);
    }
    cp_async_commit();
  }
  // FP8: the scales of k-step kt + 1 are loaded during k-step kt, so that their L2 latency hides behind a
  // whole iteration (loaded in the group that uses them, they stalled every k-step); A's come from the
  // kernel before, so the first ones follow the grid wait above. Per group: the 2 MI row scales, then the
  // gate and the up block's.
  constexpr int SCALES = 2 * C::MI + 2, SCALE_GROUPS = FP8 ? GROUPS : 1;
  float scale_now[SCALE_GROUPS][SCALES] = {}, scale_next[SCALE_GROUPS][SCALES] = {};
  auto load_scales = [&](int kt, float (&out)[SCALE_GROUPS][SCALES]) {
#pragma unroll
    for (int group = 0; group < SCALE_GROUPS; ++group) {
      const int64_t g = int64_t{kt} * GROUPS + group;
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          out[group][2 * mi + half] = a_scale_row[mi][half] ? __ldcg(a_scale_row[mi][half] + g) : 0.0f;
      out[group][2 * C::MI] = __ldg(b_scale_gate + g);
      out[group][2 * C::MI + 1] = __ldg(b_scale_up + g);
    }
  };
  if constexpr (FP8) {
    if (k_tiles > 0) load_scales(0, scale_now);
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    // The stage computed last iteration is free once every thread passed the barrier above.
    const int next = kt + C::STAGES - 1;
    if (next < k_tiles) {
      load_a(next % C::STAGES, int64_t{next} * C::BK);
      load_b(next % C::STAGES, int64_t{next} * C::BK);
    }
    cp_async_commit();
    if constexpr (FP8) {
      if (kt + 1 < k_tiles) load_scales(kt + 1, scale_next);
    }

    const bf16* sa = smem + (kt % C::STAGES) * C::STAGE_ELEMS;
    const bf16* sb = sa + C::BM * C::BK;
#pragma unroll
    for (int group = 0; group < GROUPS; ++group) {
      float part[FP8 ? C::MI : 1][FP8 ? C::NI : 1][4] = {};
#pragma unroll
      for (int kk = group * KK_PER_GROUP; kk < (group + 1) * KK_PER_GROUP; ++kk) {
        unsigned af[C::MI][4];
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi) {
          const int row = warp_m * C::TM + mi * 16 + lane % 16;
          ldmatrix_x4(af[mi], sa + swizzle<C>(row, kk * 2 + lane / 16));
        }
#pragma unroll
        for (int pair = 0; pair < C::NI / 2; ++pair) {
          unsigned bfrag[4];
          const int row = warp_n * C::TN + pair * 16 + (lane / 16) * 8 + lane % 8;
          ldmatrix_x4(bfrag, sb + swizzle<C>(row, kk * 2 + (lane / 8) % 2));
#pragma unroll
          for (int mi = 0; mi < C::MI; ++mi) {
            if constexpr (FP8) {
              mma_e4m3(part[mi][2 * pair], af[mi], bfrag[0], bfrag[1]);
              mma_e4m3(part[mi][2 * pair + 1], af[mi], bfrag[2], bfrag[3]);
            } else {
              mma_bf16(acc[mi][2 * pair], af[mi], bfrag[0], bfrag[1]);
              mma_bf16(acc[mi][2 * pair + 1], af[mi], bfrag[2], bfrag[3]);
            }
          }
        }
      }
      if constexpr (FP8) {
        // SwiGLU: the warp's first NI / 2 mma columns are gate rows, the rest up rows (weight_row).
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < C::NI; ++ni)
#pragma unroll
            for (int q = 0; q < 4; ++q)
              acc[mi][ni][q] += part[mi][ni][q] *
                                (scale_now[group][2 * mi + q / 2] *
                                 scale_now[group][2 * C::MI + (SWIGLU && ni >= C::NI / 2 ? 1 : 0)]);
      }
    }
    if constexpr (FP8) {
#pragma unroll
      for (int group = 0; group < SCALE_GROUPS; ++group)
#pragma unroll
        for (int i = 0; i < SCALES; ++i) scale_now[group][i] = scale_next[group][i];
    }
  }
  cp_async_wait<0>();
  // NOTE: otherwise only after the main loop, so that in prefill the next kernel's blocks cannot take SM slots
  // while blocks of this one still wait to run.
  if (!early_dependent_launch) allow_dependent_launch();

  // Epilogue: accumulator element (mi, ni, q) sits at row lane/4 (+8 for q >= 2), column 2*(lane%4) + q%2.
  constexpr int OUT_NI = SWIGLU ? C::NI / 2 : C::NI;
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = row0 + warp_m * C::TM + mi * 16 + lane / 4 + half * 8;
      if (row >= row_end) continue;
#pragma unroll
      for (int ni = 0; ni < OUT_NI; ++ni) {
        const int64_t column = n0 + warp_n * (SWIGLU ? C::TN / 2 : C::TN) + ni * 8 + (lane % 4) * 2;
        float v0 = acc[mi][ni][half * 2], v1 = acc[mi][ni][half * 2 + 1];
        if constexpr (SWIGLU) {
          const float u0 = acc[mi][ni + OUT_NI][half * 2], u1 = acc[mi][ni + OUT_NI][half * 2 + 1];
          v0 = swiglu(v0, u0);
          v1 = swiglu(v1, u1);
        }
        bf16* out = c + row * n + column;
        if (column + 1 < n) {
          *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v0, v1);
        } else if (column < n) {
          *out = __float2bfloat16_rn(v0);
        }
      }
    }
}

// NOTE: tile shapes by regime. Decode (a few rows per expert) is a weight stream: short tiles, narrow N so
// that many blocks share the stream, deep pipelines. Prefill is compute: 128x128 tiles.
// NOTE: a decode block streams its weight rows through the pipeline; with 6 stages of 4 KB (BK = 64) the
// Qwen3 T=1 up GEMM reached only 2.8 TB/s (ncu: 17.8 us for 50 MB): too few bytes in flight per block.
// BK = 128 doubles them and pays on long rows (DeepSeek-V3 T=1 up GEMM, K = 7168: 223 -> 205 us layer);
// on short ones (Qwen3, K = 2048 and 768) its larger stages cost occupancy (40 -> 43 us), so BK = 64 stays
// below K = 4096 and for inner sizes that are not multiples of 128 (at Qwen3 T = 16..128 too: k-steps of
// 128 there, MOE_DECODE_WIDE_K=0, were 13-17 us slower; H200, 2026-11-30).
// 32 weight rows a block measured best at Qwen3 T = 16..128: 64 and 128 (6 and 4 stages) were 4-14 us slower
// (2026-11-30), unlike the 32-row tiles below.
using Decode16 = TileConfig<16, 32, 128, 1, 2, 6>;
using Decode16Narrow = TileConfig<16, 32, 64, 1, 2, 6>;
// 9-16 rows per expert on average (experts of up to 32): still a weight stream, each expert's rows in one
// tile (two 16-row tiles would stream its weights twice).
// NOTE: k-steps of 64 in 6 stages; k-steps of 128 in 4 stages (3 blocks an SM) took Mixtral T=64 from 713 to
// 822-842 us. 128 weight rows a block (4 warps side by side, 4 stages), not 32: each block reads its 32 token
// rows from L2 once per 128 weight rows instead of once per 32, which at Mixtral's K = 4096 doubled the L2
// traffic of the weight stream. Measured (H200, 2026-11-30): Mixtral T=48 688 -> 674 us, T=64
// 696 -> 678, and T=128 forced into these tiles 1,021 -> 813; 64 rows (2 warps, 6 stages) was slower (751).
using Decode32 = TileConfig<32, 128, 64, 1, 4, 4>;
// 17-96 rows per expert, where the policy runs wgmma on Hopper: this tile is the kernel elsewhere (GPUs without
// sm_90a, MOE_GROUPED_GEMM=mma) and where the tuned table picks it. NOTE: k-steps of 64 (was 32) in 4 stages,
// 8 warps of 32x32: measured against the old k-steps of 32 (H200, 2026-12-01) Mixtral T=128
// 1,194 -> 737 us, Qwen3 T=512 511 -> 356, OLMoE T=256 360 -> 246, DeepSeek-V3 T=1024 9,417 -> 6,269; 4 warps
// of 64x32 and 3 stages were within 2% (4 warps in 3 stages led at 64 rows an expert, where wgmma leads
// anyway), 256 weight rows a block (1 block an SM) 9-20% slower.
using Mid64 = TileConfig<64, 128, 64, 2, 4, 4>;
// MOE_TILE_ROWS=48 (not the policy): each expert's rows in one tile at up to ~45 rows, a third fewer masked rows
// than 64-row tiles, many small blocks sharing the weight stream. NOTE: at 32 rows an expert with balanced
// routing it beat wgmma (H200, 2026-12-01: Mixtral T=128 755 -> 695 us, DeepSeek-V3 T=1024 5,736
// -> 5,464, Qwen3 T=512 368 -> 351, OLMoE T=256 255 -> 244; 6 warps of 16x64 within 1%, 3 stages +-1-3% by
// shape), but with skewed (Zipf) routing the hot experts' hundreds of rows ran as many mma.sync tiles:
// DeepSeek-V3 T=1024 3,942 -> 5,284 us, Mixtral T=128 755 -> 843. The policy cannot see the skew (the counts
// are on the device), so it keeps wgmma from 17 rows an expert.
using Mid48 = TileConfig<48, 128, 64, 1, 4, 4>;
// NOTE: measured on the H200 (2026-11-29): 4 warps of 64x64 beat 8 warps of 32x64
// (Mixtral T=8192: 306 vs 273 TFLOP/s), BK=64 with 3 stages (264), and 128x256 tiles (295).
using Prefill128 = TileConfig<128, 128, 32, 2, 2, 4>;

template <class C, bool SWIGLU, bool SETTLED_MAP, bool FP8>
void launch_kernel(const GroupedGemmArgs& g, const dim3 grid, int64_t n_col_tiles, cudaStream_t stream) {
  constexpr auto kernel = grouped_gemm_kernel<C, SWIGLU, SETTLED_MAP, FP8>;
  raise_shared_memory_once<kernel>(C::SMEM_BYTES);
  const bf16* a = FP8 ? reinterpret_cast<const bf16*>(g.a_fp8) : g.a;
  const bf16* b = FP8 ? reinterpret_cast<const bf16*>(g.b_fp8) : g.b;
  launch_dependent(kernel, grid, dim3(C::THREADS), C::SMEM_BYTES, stream, a, g.gather, b, g.c, g.segment_offsets,
                   g.segment_counts, g.tile_expert, g.tile_row, g.n_tiles, FP8 ? g.k / 2 : g.k, g.n, g.max_tiles,
                   n_col_tiles, g.early_dependent_launch, g.a_scale, g.b_scale);
}

template <class C, bool SWIGLU, bool FP8>
void launch_with(const GroupedGemmArgs& g, const dim3 grid, int64_t n_col_tiles, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(!(SWIGLU && g.tile_map_settled), "grouped GEMM: the SwiGLU GEMM's tile map is never settled");
  if constexpr (!SWIGLU) {
    if (g.tile_map_settled) return launch_kernel<C, SWIGLU, true, FP8>(g, grid, n_col_tiles, stream);
  }
  launch_kernel<C, SWIGLU, false, FP8>(g, grid, n_col_tiles, stream);
}

template <class C, bool SWIGLU>
void launch(const GroupedGemmArgs& g, cudaStream_t stream) {
  const bool fp8 = g.b_fp8 != nullptr;
  // The kernel's k counts bf16 values or, in fp8, pairs of e4m3 values.
  const int64_t k_units = fp8 ? g.k / 2 : g.k;
  if (fp8) {
    MOE_CUDA_REQUIRE(g.a_fp8 && g.a_scale && g.b_scale, "fp8 grouped GEMM: a_fp8, a_scale and b_scale must be set");
    MOE_CUDA_REQUIRE(g.k % 128 == 0, "fp8 grouped GEMM: inner size " + std::to_string(g.k) +
                                         " must be a multiple of the 128-value scale group");
    MOE_CUDA_REQUIRE(C::BK % 64 == 0, "fp8 grouped GEMM: no fp8 kernel for tiles of " + std::to_string(C::BM) +
                                          " rows (their k-steps are shorter than a scale group); use 64");
  }
  MOE_CUDA_REQUIRE(k_units % C::BK == 0, "grouped GEMM: inner size " + std::to_string(g.k) +
                                             " must be a multiple of " + std::to_string(fp8 ? 2 * C::BK : C::BK));
  MOE_CUDA_REQUIRE(g.n % 2 == 0, "grouped GEMM: output columns " + std::to_string(g.n) + " must be even");
  MOE_CUDA_REQUIRE(g.tall_rows == 0, "grouped GEMM: the mma.sync kernels take tile maps without tall tiles "
                                     "(tall_rows " + std::to_string(g.tall_rows) + "; only the wgmma kernel has them)");
  if (g.max_tiles == 0) return;
  constexpr int OUT_COLS = SWIGLU ? C::BN / 2 : C::BN;
  const int64_t n_col_tiles = (g.n + OUT_COLS - 1) / OUT_COLS;
  const dim3 grid(static_cast<unsigned>(g.max_tiles * n_col_tiles));
  if constexpr (C::BK % 64 == 0) {
    if (fp8) return launch_with<C, SWIGLU, true>(g, grid, n_col_tiles, stream);
  }
  launch_with<C, SWIGLU, false>(g, grid, n_col_tiles, stream);
}

// The inner size from which 16-row tiles take k-steps of 128 (MOE_DECODE_WIDE_K overrides it, to measure).
int64_t decode_wide_k() {
  return knobs().decode_wide_k.value_or(4096);
}

template <bool SWIGLU>
void dispatch(const GroupedGemmArgs& g, int tile_rows, cudaStream_t stream) {
  // NOTE: in fp8 a k-step of BK pairs carries as many bytes as a bf16 one of BK values, so the wide k-steps
  // go by bytes a row too.
  const int64_t k_units = g.b_fp8 ? g.k / 2 : g.k;
  switch (tile_rows) {
    case 16:
      return k_units >= decode_wide_k() && k_units % Decode16::BK == 0 ? launch<Decode16, SWIGLU>(g, stream)
                                                                        : launch<Decode16Narrow, SWIGLU>(g, stream);
    case 32: return launch<Decode32, SWIGLU>(g, stream);
    case 48: return launch<Mid48, SWIGLU>(g, stream);
    case 64: return launch<Mid64, SWIGLU>(g, stream);
    case 128: return launch<Prefill128, SWIGLU>(g, stream);
    default: MOE_CUDA_REQUIRE(false, "grouped GEMM: no kernel for tiles of " + std::to_string(tile_rows) + " rows");
  }
}

}  // namespace

bool fp8_grouped_gemm_available() {
  static const bool available = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MOE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    // The code the GPU runs must be built for sm_89 or later too (mma_e4m3 traps below it).
    cudaFuncAttributes attributes{};
    MOE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, grouped_gemm_kernel<Mid64, true, false, true>));
    return major * 10 + minor >= 89 && attributes.binaryVersion >= 89;
  }();
  return available;
}

void grouped_gemm_swiglu(const GroupedGemmArgs& args, int tile_rows, cudaStream_t stream) {
  dispatch<true>(args, tile_rows, stream);
}

void grouped_gemm(const GroupedGemmArgs& args, int tile_rows, cudaStream_t stream) {
  dispatch<false>(args, tile_rows, stream);
}

}  // namespace moe::cuda
