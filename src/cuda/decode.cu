// The fused decode path: the whole MoE layer for a few tokens in one persistent launch, one block per SM,
// in three phases separated by two grid-wide barriers:
//   0. router: the fp32 gate GEMV, split over every block ((gate row, H part) items, fixed-order sums);
//   -- barrier --
//   1. every block routes every token itself (the same select_topk as router.cu, so the same choices),
//      lists the distinct experts in index order with their token masks, then streams its share of the
//      gate+up weight rows of those experts (and the shared expert) and writes silu(gate) * up (bf16);
//   -- barrier --
//   2. every block owns a range of output columns h and, for every token, dots row h of each chosen
//      expert's down weight with that expert's activation, then sums them with the routing weights in
//      slot order: deterministic, no atomics on data.
// Decode is bound by the weight stream, so the work of phases 1 and 2 is split over all SMs along weight
// rows (16-byte loads that skip L1, 16 per thread in flight in phase 1), and between its arrival at the
// second barrier and its wait each block prefetches the first down rows it will read into L2, so the memory
// system stays busy across it. FP8 experts (the FP8 template) stream e4m3 rows, half the bytes, in the same
// 16-byte chunks (16 values instead of 8), dequantised in registers: each chunk lies in one 128-wide block,
// so its dot product with the bf16 activations is taken first and multiplied by the block's scale once.
// INT4 experts (the int4 variant) stream int4_tiles.h's 16-row x 128-input tiles, a quarter of the bytes: a
// warp's task is a row tile (16 rows) over a few groups, multiplied on tensor cores with every token of the
// expert as a column (decode_int4.cuh), so T = 8 costs what T = 1 does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "launch.h"
#include "core/knobs.h"
#include "cuda/bf16x8.cuh"
#include "cuda/check.h"
#include "cuda/decode_int4.cuh"
#include "cuda/int4_tiles.h"
#include "cuda/ops.h"
#include "router_select.cuh"
#include "swiglu.cuh"

namespace moe::cuda {

namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kMaxExperts = 1024, kMaxTopK = 32;
constexpr int kMaxSlots = kDecodeMaxTokens * (kMaxTopK + 1);  // routed slots + one shared slot per token
constexpr int kUpSegChunks = 256;    // phase 1: 16-byte chunks of a weight row per task (8 per lane)
constexpr int kDownSegChunks = 128;  // phase 2: 16-byte chunks of a down row per task (4 per lane)
constexpr int kDownRows = 4;         // phase 2: down rows per task
constexpr int kPartialFloats = 8192;  // phases 1 and 2 reduce through this many floats of shared memory
constexpr int kInt4UpGroups = 4;      // INT4 phase 1: 128-input groups per task (16 loads of 16 bytes a lane)
constexpr int kInt4DownLoads = 4;     // INT4 phase 2: groups in flight per task (8 loads of 16 bytes a lane)

enum class Format { bf16, fp8, int4 };  // of the streamed expert weights

struct DecodeParams {
  RouterParams router;
  const bf16* x;
  int T;
  int hidden;
  const float* gate;
  int gate_rows, parts;  // router items: (gate row, H part)
  const float* bias;
  const bf16 *w13, *w2;
  int I;
  const bf16 *shared_w13, *shared_w2;
  int S;  // 0: no shared expert
  // FP8 (DecodeWeights): e4m3 experts and their 128x128 block scales, read instead of the bf16 ones.
  const uint8_t *w13_fp8, *w2_fp8, *shared_w13_fp8, *shared_w2_fp8;
  const float *w13_scale, *w2_scale, *shared_w13_scale, *shared_w2_scale;
  // INT4 (DecodeWeights): int4_tiles.h's tiles and scale_zero entries.
  const uint8_t *w13_int4, *w2_int4, *shared_w13_int4, *shared_w2_int4;
  const uint32_t *w13_sz, *w2_sz, *shared_w13_sz, *shared_w2_sz;
  int down_groups;  // INT4 phase 2: 128-input groups per task
  bool shared_gated;
  int up_segs, down_segs;  // H split into up_segs segments (phase 1); max(I, S) into down_segs (phase 2)
  int prefetch_bytes;      // per block, at the second barrier
  float* logit_parts;      // [T, gate_rows, parts]
  bf16* act;               // [T, act_stride]: activation rows of the distinct experts, then the shared one
  int64_t act_stride;
  unsigned* barrier;  // [1]: arrivals (see grid_barrier)
  int32_t *expert_counts, *dropped;
  float* out;
  int32_t* topk_ids;
  float* topk_weights;
  unsigned long long* trace;       // null, or [grid, kDecodeTracePoints] %globaltimer stamps (profiling)
};

__device__ __forceinline__ void stamp(const DecodeParams& p, int point) {
  if (p.trace != nullptr && threadIdx.x == 0) {
    unsigned long long now;
    // NOTE: the memory clobber keeps the compiler from moving loads and stores across the stamp.
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now) : : "memory");
    p.trace[blockIdx.x * kDecodeTracePoints + point] = now;
  }
}

// Streamed weights: read once, so they skip L1 (the activations and x live there and in shared memory).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Starts moving `bytes` (a multiple of 16, 16-byte aligned) at p into L2; nothing waits for it.
__device__ __forceinline__ void prefetch_l2(const void* p, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned add_release(unsigned* p, unsigned value) {
  unsigned old;
  asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(value) : "memory");
  return old;
}

// All blocks of the grid (co-resident: cooperative launch) meet here; writes made before the arrival are
// visible after the wait (between the two, a block may only do what no other block reads: prefetches).
// One atomic per block: block 0 adds 2^31 - (blocks - 1), the others 1, so the counter's top bit flips
// exactly when the last block arrives and its low bits are back to zero: nothing to reset, for the next
// barrier and the next launch alike. (A counter and a generation word took ~2-3.5 us from the last
// arrival to the departure on the H200: three round trips to L2 and sequentially consistent fences.)
// Split in two so that a block can start work that needs no other block (prefetches) between its
// arrival and its wait: grid_barrier_arrive returns what grid_barrier_wait needs (thread 0's view).
__device__ __forceinline__ unsigned grid_barrier_arrive(unsigned* barrier) {
  __syncthreads();
  unsigned old = 0;
  if (threadIdx.x == 0) old = add_release(barrier, blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u);
  return old;
}
__device__ __forceinline__ void grid_barrier_wait(unsigned* barrier, unsigned arrived) {
  if (threadIdx.x == 0) {
    while (((arrived ^ load_acquire(barrier)) & 0x80000000u) == 0) {
    }
  }
  __syncthreads();
}
__device__ __forceinline__ void grid_barrier(unsigned* barrier) {
  grid_barrier_wait(barrier, grid_barrier_arrive(barrier));
}

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// sum_i w[i] * x[i] over 16 e4m3 weights and 16 bf16 values (x_lo: the first 8, x_hi: the last 8); the
// e4m3 -> half conversion is exact (every e4m3 value is a half).
__device__ __forceinline__ float dot16_fp8(const uint4& w, const uint4& x_lo, const uint4& x_hi) {
  const auto* wv = reinterpret_cast<const __nv_fp8x2_storage_t*>(&w);
  const auto* lo = reinterpret_cast<const __nv_bfloat162*>(&x_lo);
  const auto* hi = reinterpret_cast<const __nv_bfloat162*>(&x_hi);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 x = __bfloat1622float2(i < 4 ? lo[i] : hi[i - 4]);
    const float2 wf = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(wv[i], __NV_E4M3)));
    sum = fmaf(wf.x, x.x, sum);
    sum = fmaf(wf.y, x.y, sum);
  }
  return sum;
}

// Adds sum_i g[i] * x[i] to gp and sum_i u[i] * x[i] to up over 16 e4m3 weights of two rows and 16 bf16
// values (x_lo: the first 8, x_hi: the last 8), a pair of values at a time (few registers live: the
// decode kernel's loads in flight need them).
__device__ __forceinline__ void dot16_fp8_pair(const uint4& g, const uint4& u, const uint4& x_lo, const uint4& x_hi,
                                               float& gp, float& up) {
  const auto* gv = reinterpret_cast<const __nv_fp8x2_storage_t*>(&g);
  const auto* uv = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
  const auto* lo = reinterpret_cast<const __nv_bfloat162*>(&x_lo);
  const auto* hi = reinterpret_cast<const __nv_bfloat162*>(&x_hi);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 x = __bfloat1622float2(i < 4 ? lo[i] : hi[i - 4]);
    const float2 gf = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(gv[i], __NV_E4M3)));
    const float2 uf = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(uv[i], __NV_E4M3)));
    gp = fmaf(gf.x, x.x, gp);
    gp = fmaf(gf.y, x.y, gp);
    up = fmaf(uf.x, x.x, up);
    up = fmaf(uf.y, x.y, up);
  }
}

// The block's share [begin, end) of n items split evenly over the grid.
__device__ __forceinline__ int2 block_range(int64_t n) {
  return {static_cast<int>(n * blockIdx.x / gridDim.x), static_cast<int>(n * (blockIdx.x + 1) / gridDim.x)};
}

// INT4 phase 1's task (row, seg): the gate and up tiles of the 16 rows from `row` (routed rows are (entry, i),
// then the shared expert's) over the groups of segment seg, and their scale_zero entries.
struct Int4GateUp {
  int entry, first, count;  // groups [first, first + count)
  const uint8_t *gate, *up;  // the first group's tiles (the next groups follow)
  const uint32_t *gate_sz, *up_sz;
};

__device__ __forceinline__ Int4GateUp int4_gate_up(const DecodeParams& p, int row, int seg, int64_t routed_rows,
                                                   int D, const int* entry_expert) {
  const int H = p.hidden, groups = H / static_cast<int>(kInt4Group);
  const bool routed = row < routed_rows;
  const int entry = routed ? row / p.I : D, i0 = routed ? row % p.I : row - static_cast<int>(routed_rows);
  const int n = routed ? p.I : p.S;
  const int64_t expert = routed ? entry_expert[entry] : 0;
  const uint8_t* tiles = routed ? p.w13_int4 + expert * 2 * p.I * int64_t{H} / 2 : p.shared_w13_int4;
  const uint32_t* sz = routed ? p.w13_sz + expert * 2 * p.I * int64_t{groups} : p.shared_w13_sz;
  const int first = seg * kInt4UpGroups;
  const int64_t gate_tile = int64_t{i0 / 16} * groups + first, up_tile = int64_t{(n + i0) / 16} * groups + first;
  return {entry, first, min(kInt4UpGroups, groups - first), tiles + gate_tile * kInt4TileBytes,
          tiles + up_tile * kInt4TileBytes, sz + gate_tile * kInt4TileRows, sz + up_tile * kInt4TileRows};
}

// INT4 phase 1: task `tiles`, every token of the entry a column. Writes the partial sums as the bf16 path does:
// out_rows [16 rows][up_segs][MAXT tokens][gate, up], for the entry's tokens.
template <int MAXT>
__device__ __forceinline__ void gate_up_task_int4(const DecodeParams& p, const bf16* xs, float* out_rows,
                                                  const Int4GateUp& tiles, int seg, const unsigned* entry_mask) {
  const int lane = threadIdx.x % 32, r = lane / 4, c = lane % 4, H = p.hidden, T = p.T;
  const int entry = tiles.entry, first = tiles.first, count = tiles.count;
  uint4 g[kInt4UpGroups][2], u[kInt4UpGroups][2];
#pragma unroll
  for (int gi = 0; gi < kInt4UpGroups; ++gi) {
    const uint8_t* gt = tiles.gate + gi * kInt4TileBytes + lane * 16;
    const uint8_t* ut = tiles.up + gi * kInt4TileBytes + lane * 16;
    const bool ok = gi < count;
    g[gi][0] = ok ? load_stream(gt) : make_uint4(0, 0, 0, 0);
    g[gi][1] = ok ? load_stream(gt + 512) : make_uint4(0, 0, 0, 0);
    u[gi][0] = ok ? load_stream(ut) : make_uint4(0, 0, 0, 0);
    u[gi][1] = ok ? load_stream(ut + 512) : make_uint4(0, 0, 0, 0);
  }
  const unsigned mask = entry_mask[entry];
  const int token = lane / 4;  // this lane's B column
  const bf16* x = token < T && ((mask >> token) & 1u) ? xs + token * H : nullptr;
  float ga[4] = {}, ua[4] = {};
#pragma unroll
  for (int gi = 0; gi < kInt4UpGroups; ++gi) {
    if (gi >= count) break;
    const int group = first + gi;
    const uint32_t* gs = tiles.gate_sz + gi * kInt4TileRows;
    const uint32_t* us = tiles.up_sz + gi * kInt4TileRows;
    const bf16* b = x != nullptr ? x + group * kInt4Group : nullptr;
    int4_tile_mma(ga, g[gi][0], g[gi][1], __ldg(gs + r), __ldg(gs + r + 8), b, c);
    int4_tile_mma(ua, u[gi][0], u[gi][1], __ldg(us + r), __ldg(us + r + 8), b, c);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int tt = 0; tt < 2; ++tt) {
      const int t = 2 * c + tt;
      if (t >= T || !((mask >> t) & 1u)) continue;
      float* out = out_rows + ((r + 8 * half) * p.up_segs + seg) * 2 * MAXT;
      out[2 * t] = ga[2 * half + tt];
      out[2 * t + 1] = ua[2 * half + tt];
    }
  }
}

// INT4 phase 2: down rows [h_first, h_first + 16) of entry `entry` over the groups of segment seg, every
// token of the entry a column. Writes each token's partial sum where the bf16 path writes its slot's:
// out_cols [16 columns][T][n_slots][down_segs].
__device__ __forceinline__ void down_task_int4(const DecodeParams& p, float* out_cols, int per_column, int h_first,
                                               int entry, int seg, int D, int n_slots, const int* entry_expert,
                                               const unsigned* entry_mask, const int* slot_entry) {
  const int lane = threadIdx.x % 32, r = lane / 4, c = lane % 4, H = p.hidden, T = p.T;
  const bool routed = entry < D;
  const int n = routed ? p.I : p.S, groups = n / static_cast<int>(kInt4Group);
  const int64_t expert = routed ? entry_expert[entry] : 0;
  const uint8_t* tiles = routed ? p.w2_int4 + expert * int64_t{H} * p.I / 2 : p.shared_w2_int4;
  const uint32_t* sz = routed ? p.w2_sz + expert * int64_t{H} * (p.I / kInt4Group) : p.shared_w2_sz;
  const int64_t row_tile = int64_t{h_first / 16} * groups;
  const unsigned mask = entry_mask[entry];
  const int token = lane / 4;
  const bf16* act = token < T && ((mask >> token) & 1u)
                        ? p.act + token * p.act_stride + (routed ? int64_t{entry} * p.I : int64_t{D} * p.I)
                        : nullptr;
  const int first = seg * p.down_groups, last = min(groups, first + p.down_groups);
  float acc[4] = {};
  for (int g0 = first; g0 < last; g0 += kInt4DownLoads) {
    uint4 w[kInt4DownLoads][2];
#pragma unroll
    for (int gi = 0; gi < kInt4DownLoads; ++gi) {
      const uint8_t* t = tiles + (row_tile + g0 + gi) * kInt4TileBytes + lane * 16;
      const bool ok = g0 + gi < last;
      w[gi][0] = ok ? load_stream(t) : make_uint4(0, 0, 0, 0);
      w[gi][1] = ok ? load_stream(t + 512) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int gi = 0; gi < kInt4DownLoads; ++gi) {
      const int group = g0 + gi;
      if (group >= last) break;
      const uint32_t* s = sz + (row_tile + group) * kInt4TileRows;
      int4_tile_mma(acc, w[gi][0], w[gi][1], __ldg(s + r), __ldg(s + r + 8),
                    act != nullptr ? act + group * kInt4Group : nullptr, c);
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int tt = 0; tt < 2; ++tt) {
      const int t = 2 * c + tt;
      if (t >= T || !((mask >> t) & 1u)) continue;
      int j = 0;  // the token's slot of this entry (a token chooses an expert once)
      while (j + 1 < n_slots && slot_entry[t * n_slots + j] != entry) ++j;
      out_cols[(r + 8 * half) * per_column + (t * n_slots + j) * p.down_segs + seg] = acc[2 * half + tt];
    }
  }
}

template <int MAXT, Format F>
static __global__ void __launch_bounds__(kThreads, 1) decode_layer_kernel(const DecodeParams p) {
  constexpr bool FP8 = F == Format::fp8, INT4 = F == Format::int4;
  constexpr int kTaskRows = INT4 ? static_cast<int>(kInt4TileRows) : 1;  // weight rows of a task
  constexpr int VALS = FP8 ? 16 : 8;        // weight values per 16-byte chunk
  constexpr int64_t WBYTES = FP8 ? 1 : 2;  // bytes per weight value
  constexpr int kScaleBlock = 128;         // FP8: values per block side (fp8_block.cu)
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  // Dynamic: x [T, H] bf16, then one region used first as the router's scratch (per token: logits
  // [gate_rows], choice [E], score [E]) and then as the partial sums of phases 1 and 2.
  bf16* xs = reinterpret_cast<bf16*>(dynamic_smem);
  float* scratch = reinterpret_cast<float*>(dynamic_smem + ((size_t{2} * p.T * p.hidden + 15) / 16) * 16);
  __shared__ unsigned expert_mask[kMaxExperts];  // bit t: token t chose expert e
  __shared__ float bias_s[kMaxExperts];          // the correction bias (zeros without one)
  __shared__ int entry_of[kMaxExperts];          // expert -> its entry (index among the distinct experts)
  __shared__ int entry_expert[kMaxSlots + 1];
  __shared__ unsigned entry_mask[kMaxSlots + 1];
  __shared__ int32_t chosen_ids[kDecodeMaxTokens * kMaxTopK];
  __shared__ float chosen_weights[kDecodeMaxTokens * kMaxTopK];
  __shared__ int slot_entry[kMaxSlots];  // [T, n_slots]: k routed slots, then the shared slot
  __shared__ float slot_weight[kMaxSlots];
  __shared__ float shared_scale[kDecodeMaxTokens];
  __shared__ float reduce[kWarps][MAXT];
  __shared__ int n_distinct;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int T = p.T, H = p.hidden, E = p.router.n_experts, k = p.router.top_k;
  stamp(p, 0);

  // The block's gate rows start moving into L2 while x is staged (they are independent reads).
  const int quads = H / 4, part_quads = (quads + p.parts - 1) / p.parts;
  if (tid == 0) {
    for (int item = blockIdx.x; item < p.gate_rows * p.parts; item += gridDim.x) {
      const int row = item / p.parts, part = item % p.parts;
      const int begin = part * part_quads, end = min(quads, begin + part_quads);
      if (end > begin) prefetch_l2(p.gate + int64_t{row} * H + 4 * begin, 16 * (end - begin));
    }
  }
  // NOTE: launched dependent on the kernel before (which makes x): the gate rows above are weights; x, the
  // outputs and the grid barrier's counter wait for that kernel.
  wait_for_prior_grids();
  // x into shared memory (every phase reads it or its routing), expert masks cleared.
  {
    const uint4* src = reinterpret_cast<const uint4*>(p.x);
    uint4* dst = reinterpret_cast<uint4*>(xs);
    for (int i = tid; i < T * H / 8; i += kThreads) dst[i] = src[i];
    for (int e = tid; e < E; e += kThreads) {
      expert_mask[e] = 0;
      bias_s[e] = p.bias ? p.bias[e] : 0.0f;
    }
  }
  __syncthreads();
  stamp(p, 1);

  // ---- Phase 0: router logits, in parts. -------------------------------------------------------------
  {
    for (int item = blockIdx.x; item < p.gate_rows * p.parts; item += gridDim.x) {
      const int row = item / p.parts, part = item % p.parts;
      const int begin = part * part_quads, end = min(quads, begin + part_quads);
      const float4* g = reinterpret_cast<const float4*>(p.gate + int64_t{row} * H);
      float acc[MAXT] = {};
#pragma unroll 4
      for (int q = begin + tid; q < end; q += kThreads) {
        const float4 w = __ldg(g + q);
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
          if (t >= T) break;
          const uint2 packed = *reinterpret_cast<const uint2*>(xs + t * H + 4 * q);
          const auto* xv = reinterpret_cast<const __nv_bfloat162*>(&packed);
          const float2 x0 = __bfloat1622float2(xv[0]), x1 = __bfloat1622float2(xv[1]);
          acc[t] += w.x * x0.x + w.y * x0.y + w.z * x1.x + w.w * x1.y;
        }
      }
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        const float s = warp_sum(acc[t]);
        if (lane == 0) reduce[warp][t] = s;
      }
      __syncthreads();
      if (tid < T) {
        float total = 0.0f;
        for (int w = 0; w < kWarps; ++w) total += reduce[w][tid];
        p.logit_parts[(int64_t{tid} * p.gate_rows + row) * p.parts + part] = total;
      }
      __syncthreads();
    }
  }
  stamp(p, 2);
  grid_barrier(p.barrier);
  stamp(p, 3);

  // ---- Routing, redundantly in every block (same inputs, same code: same choices everywhere). --------
  const int n_slots = k + (p.S > 0 ? 1 : 0);
  if (warp < T) {
    const int t = warp;
    float* logits = scratch + t * (p.gate_rows + 2 * E);
    // NOTE: every load of a batch is issued before any is summed (one L2 round trip per batch, not per
    // logit: the lanes' dependent loads made routing 5-10 us of the Qwen3 / DeepSeek-V3 T=1 launch).
    const float* parts = p.logit_parts + int64_t{t} * p.gate_rows * p.parts;
    for (int e0 = 0; e0 < p.gate_rows; e0 += 32 * 8) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = 0.0f;
#pragma unroll 4
      for (int q = 0; q < p.parts; ++q) {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const int e = e0 + u * 32 + lane;
          if (e < p.gate_rows) v[u] += parts[int64_t{e} * p.parts + q];
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (e0 + u * 32 + lane < p.gate_rows) logits[e0 + u * 32 + lane] = v[u];
    }
    __syncwarp();
    stamp(p, 4);  // thread 0 routes token 0
    float* choice = logits + p.gate_rows;
    select_topk(p.router, logits, p.bias ? bias_s : nullptr, choice, choice + E, chosen_ids + t * k,
                chosen_weights + t * k);
    if (lane == 0) shared_scale[t] = p.shared_gated ? 1.0f / (1.0f + __expf(-logits[E])) : 1.0f;
    stamp(p, 5);
  }
  __syncthreads();
  for (int i = tid; i < T * k; i += kThreads) atomicOr(&expert_mask[chosen_ids[i]], 1u << (i / k));
  if (blockIdx.x == 0) {
    for (int i = tid; i < T * k; i += kThreads) {
      p.topk_ids[i] = chosen_ids[i];
      p.topk_weights[i] = chosen_weights[i];
    }
  }
  __syncthreads();
  if (warp == 0) {  // the distinct experts in index order (warp-wide compaction)
    int count = 0;
    for (int base = 0; base < E; base += 32) {
      const int e = base + lane;
      const unsigned m = e < E ? expert_mask[e] : 0u;
      const unsigned hits = __ballot_sync(kFullMask, m != 0);
      if (m != 0) {
        const int position = count + __popc(hits & ((1u << lane) - 1u));
        entry_expert[position] = e;
        entry_mask[position] = m;
        entry_of[e] = position;
      }
      count += __popc(hits);
    }
    if (lane == 0) {
      n_distinct = count;
      entry_expert[count] = -1;  // the shared expert's entry, if any
      entry_mask[count] = (1u << T) - 1u;
    }
  }
  if (blockIdx.x == 0) {  // the layer's load counters (read_counts)
    for (int e = tid; e < E; e += kThreads) {
      p.expert_counts[e] = __popc(expert_mask[e]);
      p.dropped[e] = 0;
    }
  }
  __syncthreads();
  const int D = n_distinct;
  for (int i = tid; i < T * n_slots; i += kThreads) {
    const int t = i / n_slots, j = i % n_slots;
    slot_entry[i] = j < k ? entry_of[chosen_ids[t * k + j]] : D;
    slot_weight[i] = j < k ? chosen_weights[t * k + j] : shared_scale[t];
  }
  __syncthreads();
  stamp(p, 6);

  // ---- Phase 1: gate+up and SwiGLU over the rows (entry, i), split evenly over the blocks. ------------
  // A task is one segment of a gate row and the matching up row; the block reduces segments in order.
  {
    const int64_t routed_rows = int64_t{D} * p.I, total_rows = routed_rows + p.S;
    int2 range = block_range(total_rows / kTaskRows);  // INT4: whole row tiles
    range.x *= kTaskRows;
    range.y *= kTaskRows;
    const int row_chunks = H / VALS, seg_chunks = (row_chunks + p.up_segs - 1) / p.up_segs;
    const int h_blocks = (H + kScaleBlock - 1) / kScaleBlock;
    const auto* w13 = static_cast<const unsigned char*>(FP8 ? static_cast<const void*>(p.w13_fp8) : p.w13);
    const auto* shared_w13 =
        static_cast<const unsigned char*>(FP8 ? static_cast<const void*>(p.shared_w13_fp8) : p.shared_w13);
    const int chunk_rows = kPartialFloats / (p.up_segs * 2 * MAXT) / kTaskRows * kTaskRows;
    for (int c0 = range.x; c0 < range.y; c0 += chunk_rows) {
      const int c1 = min(range.y, c0 + chunk_rows), tasks = (c1 - c0) / kTaskRows * p.up_segs;
      for (int task = warp; task < tasks; task += kWarps) {
        const int row = c0 + task / p.up_segs * kTaskRows, seg = task % p.up_segs;
        if constexpr (INT4) {
          gate_up_task_int4<MAXT>(p, xs, scratch + (row - c0) * p.up_segs * 2 * MAXT,
                                  int4_gate_up(p, row, seg, routed_rows, D, entry_expert), seg, entry_mask);
          continue;
        }
        const bool routed = row < routed_rows;
        const int entry = routed ? row / p.I : D, i = routed ? row % p.I : row - static_cast<int>(routed_rows);
        const int n = routed ? p.I : p.S;
        const int64_t expert = routed ? entry_expert[entry] : 0;
        const unsigned char* base = routed ? w13 + expert * 2 * p.I * H * WBYTES : shared_w13;
        const unsigned char* gate_row = base + int64_t{i} * H * WBYTES;
        const unsigned char* up_row = base + int64_t{n + i} * H * WBYTES;
        const unsigned mask = entry_mask[entry];
        const int first = seg * seg_chunks, last = min(row_chunks, first + seg_chunks);
        uint4 g[8], u[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int c = first + r * 32 + lane;
          g[r] = c < last ? load_stream(gate_row + c * 16) : make_uint4(0, 0, 0, 0);
          u[r] = c < last ? load_stream(up_row + c * 16) : make_uint4(0, 0, 0, 0);
        }
        // FP8: the gate and up rows' block scales (read once the weights are in flight)
        const float *g_scales = nullptr, *u_scales = nullptr;
        if constexpr (FP8) {
          const int n_blocks = (n + kScaleBlock - 1) / kScaleBlock;
          const float* scales = routed ? p.w13_scale + expert * 2 * n_blocks * h_blocks : p.shared_w13_scale;
          g_scales = scales + (i / kScaleBlock) * h_blocks;
          u_scales = scales + (n_blocks + i / kScaleBlock) * h_blocks;
        }
        // Each weight chunk is converted once and used for every token of the expert.
        float gs[MAXT], us[MAXT];
#pragma unroll
        for (int t = 0; t < MAXT; ++t) gs[t] = us[t] = 0.0f;
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int c = first + r * 32 + lane;
          if (c >= last) continue;
          if constexpr (FP8) {
            const int block = c * VALS / kScaleBlock;
            const float g_scale = __ldg(g_scales + block), u_scale = __ldg(u_scales + block);
#pragma unroll
            for (int t = 0; t < MAXT; ++t) {
              if (t >= T || !((mask >> t) & 1u)) continue;
              const uint4* x = reinterpret_cast<const uint4*>(xs + t * H + c * 16);
              float gp = 0.0f, up = 0.0f;
              dot16_fp8_pair(g[r], u[r], x[0], x[1], gp, up);
              gs[t] = fmaf(g_scale, gp, gs[t]);
              us[t] = fmaf(u_scale, up, us[t]);
            }
          } else {
            float gf[8], uf[8];
            unpack8(g[r], gf);
            unpack8(u[r], uf);
#pragma unroll
            for (int t = 0; t < MAXT; ++t) {
              if (t >= T || !((mask >> t) & 1u)) continue;
              float xf[8];
              unpack8(*reinterpret_cast<const uint4*>(xs + t * H + c * 8), xf);
#pragma unroll
              for (int e = 0; e < 8; ++e) {
                gs[t] = fmaf(gf[e], xf[e], gs[t]);
                us[t] = fmaf(uf[e], xf[e], us[t]);
              }
            }
          }
        }
        float* out = scratch + (task * 2) * MAXT;  // [row, seg][token][gate, up]
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
          if (t >= T || !((mask >> t) & 1u)) continue;
          const float gt = warp_sum(gs[t]), ut = warp_sum(us[t]);
          if (lane == 0) {
            out[2 * t] = gt;
            out[2 * t + 1] = ut;
          }
        }
      }
      __syncthreads();
      for (int idx = tid; idx < (c1 - c0) * T; idx += kThreads) {
        const int local = idx / T, t = idx % T, row = c0 + local;
        const int entry = row < routed_rows ? row / p.I : D;
        if (!((entry_mask[entry] >> t) & 1u)) continue;
        float gs = 0.0f, us = 0.0f;
        for (int seg = 0; seg < p.up_segs; ++seg) {
          const float* part = scratch + ((local * p.up_segs + seg) * 2) * MAXT;
          gs += part[2 * t];
          us += part[2 * t + 1];
        }
        const float a = swiglu(gs, us);
        p.act[t * p.act_stride + row] = __float2bfloat16_rn(a);
      }
      __syncthreads();
    }
  }

  stamp(p, 7);
  // While the other blocks finish phase 1: this block's first down rows into L2, so that the weight stream
  // does not pause. NOTE: after the arrival (its release fence): issued before it, the barrier took 2.9 us
  // from the last arrival to the departure on Qwen3 T=1, now 1.7-2.0 (H200, 2026-11-30).
  const unsigned arrived = grid_barrier_arrive(p.barrier);
  int2 columns = block_range(H / kTaskRows);  // INT4: whole row tiles of down
  columns.x *= kTaskRows;
  columns.y *= kTaskRows;
  const auto* w2 = static_cast<const unsigned char*>(FP8 ? static_cast<const void*>(p.w2_fp8) : p.w2);
  const auto* shared_w2 =
      static_cast<const unsigned char*>(FP8 ? static_cast<const void*>(p.shared_w2_fp8) : p.shared_w2);
  if constexpr (INT4) {  // 1 KiB tiles: each entry's first groups of this block's row tiles, group by group
    const int entries = D + (p.S > 0 ? 1 : 0);  // the shared expert's entry only where there is one
    const int tiles = (columns.y - columns.x) / kTaskRows, items_per_group = tiles * entries;
    const int max_groups = max(p.I, p.S) / static_cast<int>(kInt4Group);
    const int items = min(items_per_group * max_groups, p.prefetch_bytes / static_cast<int>(kInt4TileBytes));
    for (int idx = tid; idx < items; idx += kThreads) {
      const int entry = idx % entries, tile = idx / entries % tiles, group = idx / items_per_group;
      const bool routed = entry < D;
      const int groups = (routed ? p.I : p.S) / static_cast<int>(kInt4Group);
      if (group >= groups) continue;
      const uint8_t* base = routed ? p.w2_int4 + int64_t{entry_expert[entry]} * H * p.I / 2 : p.shared_w2_int4;
      prefetch_l2(base + ((int64_t{columns.x / kTaskRows} + tile) * groups + group) * kInt4TileBytes,
                  static_cast<int>(kInt4TileBytes));
    }
  } else {
    const int per_column = T * n_slots;
    const int items = (columns.y - columns.x) * per_column;
    const int budget = p.prefetch_bytes / (WBYTES * max(p.I, 1));
    for (int idx = tid; idx < min(items, budget); idx += kThreads) {
      const int h = columns.x + idx / per_column, slot = idx % per_column, entry = slot_entry[slot];
      const bool routed = entry < D;
      const int n = routed ? p.I : p.S;
      const unsigned char* row =
          (routed ? w2 + int64_t{entry_expert[entry]} * H * p.I * WBYTES : shared_w2) + int64_t{h} * n * WBYTES;
      prefetch_l2(row, n * WBYTES);
    }
  }
  grid_barrier_wait(p.barrier, arrived);
  stamp(p, 8);
  allow_dependent_launch();  // the next kernel's launch overlaps phase 2 (it waits for this grid's end)

  // ---- Phase 2: down and the weighted sum, over this block's output columns. --------------------------
  // A task is (group of kDownRows consecutive columns h, token t, slot j, segment s): the activation
  // segment is loaded once for the group's rows, and the rows' loads are all in flight together (one row
  // of 1.5 KB a task left Qwen3's down phase at ~2.5 TB/s, latency-bound).
  {
    const int per_column = T * n_slots * p.down_segs;
    const int chunk_columns = INT4 ? kPartialFloats / per_column / kTaskRows * kTaskRows
                                   : max(kDownRows, kPartialFloats / per_column / kDownRows * kDownRows);
    for (int h0 = columns.x; h0 < columns.y; h0 += chunk_columns) {
      const int h1 = min(columns.y, h0 + chunk_columns);
      const int entries = D + (p.S > 0 ? 1 : 0);
      const int tasks = INT4 ? (h1 - h0) / kTaskRows * entries * p.down_segs
                             : (h1 - h0 + kDownRows - 1) / kDownRows * per_column;
      for (int task = warp; task < tasks; task += kWarps) {
        if constexpr (INT4) {  // (row tile, entry, segment)
          const int group = task / (entries * p.down_segs), rest = task % (entries * p.down_segs);
          down_task_int4(p, scratch + group * kTaskRows * per_column, per_column, h0 + group * kTaskRows,
                         rest / p.down_segs, rest % p.down_segs, D, n_slots, entry_expert, entry_mask, slot_entry);
          continue;
        }
        const int group = task / per_column, rest = task % per_column;
        const int slot = rest / p.down_segs, seg = rest % p.down_segs;
        const int t = slot / n_slots, entry = slot_entry[slot];
        const bool routed = entry < D;
        const int n = routed ? p.I : p.S;
        const int64_t expert = routed ? entry_expert[entry] : 0;
        const int h_first = h0 + group * kDownRows;
        const unsigned char* rows =
            (routed ? w2 + expert * H * p.I * WBYTES : shared_w2) + int64_t{h_first} * n * WBYTES;
        const bf16* act = p.act + t * p.act_stride + (routed ? int64_t{entry} * p.I : int64_t{D} * p.I);
        const int first = seg * kDownSegChunks, last = min(n / VALS, first + kDownSegChunks);
        const int valid_rows = min(kDownRows, h1 - h_first);
        uint4 w[kDownRows][4], a[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int c = first + r * 32 + lane;
          const bool ok = c < last;
#pragma unroll
          for (int rr = 0; rr < kDownRows; ++rr)
            w[rr][r] = ok && rr < valid_rows ? load_stream(rows + int64_t{rr} * n * WBYTES + c * 16)
                                             : make_uint4(0, 0, 0, 0);
          a[r] = ok ? *reinterpret_cast<const uint4*>(act + c * VALS) : make_uint4(0, 0, 0, 0);
        }
        // FP8: the second 8 activations of each chunk and the rows' block scales, read once the weights are
        // in flight (registers for both up front spilled)
        const float* scales = nullptr;
        int n_blocks = 0;
        if constexpr (FP8) {
          const int h_blocks = (H + kScaleBlock - 1) / kScaleBlock;
          n_blocks = (n + kScaleBlock - 1) / kScaleBlock;
          scales = routed ? p.w2_scale + expert * h_blocks * n_blocks : p.shared_w2_scale;
        }
#pragma unroll
        for (int rr = 0; rr < kDownRows; ++rr) {
          float sum = 0.0f;
#pragma unroll
          for (int r = 0; r < 4; ++r) {  // zeros past the row
            if constexpr (FP8) {
              const int c = first + r * 32 + lane;
              if (c < last && rr < valid_rows) {
                const uint4 a_hi = *reinterpret_cast<const uint4*>(act + c * VALS + 8);
                const float scale =
                    __ldg(scales + (h_first + rr) / kScaleBlock * n_blocks + c * VALS / kScaleBlock);
                sum += scale * dot16_fp8(w[rr][r], a[r], a_hi);
              }
            } else {
              sum += dot8(w[rr][r], a[r]);
            }
          }
          sum = warp_sum(sum);
          if (lane == 0 && rr < valid_rows) scratch[(group * kDownRows + rr) * per_column + rest] = sum;
        }
      }
      __syncthreads();
      for (int idx = tid; idx < (h1 - h0) * T; idx += kThreads) {
        const int local = idx / T, t = idx % T;
        float total = 0.0f;
        for (int j = 0; j < n_slots; ++j) {
          const float* part = scratch + (local * T * n_slots + t * n_slots + j) * p.down_segs;
          float dot = 0.0f;
          for (int seg = 0; seg < p.down_segs; ++seg) dot += part[seg];
          total += slot_weight[t * n_slots + j] * dot;
        }
        p.out[int64_t{t} * H + h0 + local] = total;
      }
      __syncthreads();
    }
  }
  stamp(p, 9);
}

template <int MAXT>
size_t dynamic_smem_bytes(const DecodeParams& p) {
  const size_t x_bytes = (size_t{2} * p.T * p.hidden + 15) / 16 * 16;
  const size_t router = size_t{4} * p.T * (p.gate_rows + 2 * p.router.n_experts);
  return x_bytes + std::max<size_t>(router, size_t{4} * kPartialFloats);
}

struct DeviceLimits {
  int sms = 0;
  int smem_optin = 0;
};

const DeviceLimits& device_limits() {
  static const DeviceLimits limits = [] {
    DeviceLimits l;
    int device = 0;
    MOE_CUDA_CHECK(cudaGetDevice(&device));
    MOE_CUDA_CHECK(cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, device));
    MOE_CUDA_CHECK(cudaDeviceGetAttribute(&l.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return l;
  }();
  return limits;
}

int router_parts(int64_t gate_rows) {
  return static_cast<int>(std::clamp<int64_t>(device_limits().sms / gate_rows, 1, 32));
}

template <int MAXT, Format F>
void launch(const DecodeParams& p, cudaStream_t stream) {
  const size_t smem = dynamic_smem_bytes<MAXT>(p);
  // NOTE: the limit is the most a block may take, whatever this launch's size.
  raise_shared_memory_once<decode_layer_kernel<MAXT, F>>(device_limits().smem_optin - (24 << 10));
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeCooperative;  // the grid barriers need every block resident
  attributes[0].val.cooperative = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(device_limits().sms));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = 2;
  MOE_CUDA_CHECK(cudaLaunchKernelEx(&config, decode_layer_kernel<MAXT, F>, p));
}

unsigned long long* g_trace = nullptr;  // decode_trace: the stamps of traced launches
int g_trace_blocks = 0;

// MOE_DECODE_PREFETCH, fixed at the first read of knobs() (decode_token_limit reads it at layer construction,
// so that a bad value is an error there and not in the middle of a forward or a graph capture).
int64_t decode_prefetch_bytes() {
  return knobs().decode_prefetch.value_or(192 << 10);
}

}  // namespace

int64_t decode_token_limit(const routing::RouterConfig& c, int64_t hidden, int64_t gate_rows, bool int4) {
  decode_prefetch_bytes();
  if (c.n_experts > kMaxExperts || c.top_k > kMaxTopK || c.n_group > 32 || hidden % 8 != 0) return 0;
  // NOTE: 2 is measured on the H200 (2026-11-29): the fused path beats
  // the kernel chain at T <= 2 on all three bench shapes and loses from T = 4 (its CUDA-core dot products
  // against the chain's tensor cores once experts see several tokens). MOE_DECODE_MAX_TOKENS overrides it
  // (0 turns the fused path off) for measuring both paths on one machine.
  static_assert(kDecodeMaxTokens == kDecodeMaxTokensMax, "MOE_DECODE_MAX_TOKENS's range (core/knobs.h)");
  int64_t limit = Knobs::from_env().decode_max_tokens.value_or(int4 ? kDecodeMaxTokens : 2);
  const size_t router_floats = size_t(gate_rows + 2 * c.n_experts);
  while (limit > 0 && (size_t{2} * limit * hidden + 16 + std::max<size_t>(4 * limit * router_floats, 4 * kPartialFloats) +
                       (24u << 10)) > static_cast<size_t>(device_limits().smem_optin))
    --limit;  // x and the router's scratch must fit in shared memory beside the static arrays
  return limit;
}

int64_t decode_act_stride(const routing::RouterConfig& c, int64_t intermediate, int64_t shared_intermediate,
                          int64_t max_tokens) {
  return std::min<int64_t>(max_tokens * c.top_k, c.n_experts) * intermediate + shared_intermediate;
}

int64_t decode_logit_parts(int64_t gate_rows, int64_t max_tokens) { return max_tokens * gate_rows * router_parts(gate_rows); }

void decode_layer(const routing::RouterConfig& c, const DecodeWeights& w, int64_t hidden, const bf16* x,
                  int64_t n_tokens, const DecodeScratch& scratch, float* out, int32_t* topk_ids, float* topk_weights,
                  cudaStream_t stream) {
  MOE_CUDA_REQUIRE(n_tokens >= 0 && n_tokens <= kDecodeMaxTokens,
                   "the fused decode path takes up to " + std::to_string(kDecodeMaxTokens) + " tokens, got " +
                       std::to_string(n_tokens));
  MOE_CUDA_REQUIRE(c.n_experts <= kMaxExperts && c.top_k <= kMaxTopK && c.n_group <= 32 && hidden % 8 == 0 &&
                       w.intermediate % 8 == 0 && w.shared_intermediate % 8 == 0,
                   "the fused decode path needs E <= 1024, k <= 32, n_group <= 32 and sizes that are multiples "
                   "of 8");
  const bool fp8 = w.w13_fp8 != nullptr;
  MOE_CUDA_REQUIRE(!fp8 || (w.w13_scale && w.w2_fp8 && w.w2_scale && hidden % 16 == 0 && w.intermediate % 16 == 0 &&
                            (w.shared_intermediate == 0 || (w.shared_w13_fp8 && w.shared_w13_scale &&
                                                            w.shared_w2_fp8 && w.shared_w2_scale &&
                                                            w.shared_intermediate % 16 == 0))),
                   "the fused decode path's fp8 experts need every fp8 weight and scale (the shared expert's too) "
                   "and sizes that are multiples of 16");
  const bool int4 = w.w13_int4 != nullptr;
  MOE_CUDA_REQUIRE(!int4 || (!fp8 && w.w13_scale_zero && w.w2_int4 && w.w2_scale_zero && hidden % kInt4Group == 0 &&
                             w.intermediate % kInt4Group == 0 &&
                             (w.shared_intermediate == 0 ||
                              (w.shared_w13_int4 && w.shared_w13_scale_zero && w.shared_w2_int4 &&
                               w.shared_w2_scale_zero && w.shared_intermediate % kInt4Group == 0))),
                   "the fused decode path's int4 experts need every int4 tile and scale (the shared expert's too) "
                   "and sizes that are multiples of 128");
  if (n_tokens == 0) return;
  DecodeParams p{};
  p.router = {.method = c.method, .n_experts = c.n_experts, .top_k = c.top_k, .n_group = c.n_group,
              .topk_group = c.topk_group, .norm_topk_prob = c.norm_topk_prob,
              .routed_scaling_factor = c.routed_scaling_factor};
  p.x = x;
  p.T = static_cast<int>(n_tokens);
  p.hidden = static_cast<int>(hidden);
  p.gate = w.gate;
  p.gate_rows = static_cast<int>(w.gate_rows);
  p.parts = router_parts(w.gate_rows);
  p.bias = w.correction_bias;
  p.w13 = w.w13;
  p.w2 = w.w2;
  p.I = static_cast<int>(w.intermediate);
  p.shared_w13 = w.shared_w13;
  p.shared_w2 = w.shared_w2;
  p.S = static_cast<int>(w.shared_intermediate);
  p.shared_gated = w.shared_gated;
  p.w13_fp8 = w.w13_fp8;
  p.w2_fp8 = w.w2_fp8;
  p.shared_w13_fp8 = w.shared_w13_fp8;
  p.shared_w2_fp8 = w.shared_w2_fp8;
  p.w13_scale = w.w13_scale;
  p.w2_scale = w.w2_scale;
  p.shared_w13_scale = w.shared_w13_scale;
  p.shared_w2_scale = w.shared_w2_scale;
  p.w13_int4 = w.w13_int4;
  p.w2_int4 = w.w2_int4;
  p.shared_w13_int4 = w.shared_w13_int4;
  p.shared_w2_int4 = w.shared_w2_int4;
  p.w13_sz = w.w13_scale_zero;
  p.w2_sz = w.w2_scale_zero;
  p.shared_w13_sz = w.shared_w13_scale_zero;
  p.shared_w2_sz = w.shared_w2_scale_zero;
  const int64_t n_slots = c.top_k + (w.shared_intermediate > 0 ? 1 : 0);
  const int64_t max_t = n_tokens == 1 ? 1 : n_tokens == 2 ? 2 : n_tokens <= 4 ? 4 : 8;  // the kernel's MAXT
  int64_t task_rows = kDownRows;  // rows of a phase-2 task
  if (int4) {
    // Phase 1: kInt4UpGroups groups a task; phase 2: as few segments as fill the reduction's shared memory
    // with 16 columns a chunk, of at least kInt4DownLoads groups (loads in flight).
    const int64_t groups = hidden / kInt4Group;
    const int64_t down_groups = std::max(w.intermediate, w.shared_intermediate) / kInt4Group;
    p.up_segs = static_cast<int>((groups + kInt4UpGroups - 1) / kInt4UpGroups);
    const int64_t max_segs = std::max<int64_t>(1, kPartialFloats / (kInt4TileRows * n_tokens * n_slots));
    p.down_groups = static_cast<int>(
        std::max<int64_t>(kInt4DownLoads, (down_groups + max_segs - 1) / max_segs));
    p.down_segs = static_cast<int>((down_groups + p.down_groups - 1) / p.down_groups);
    task_rows = kInt4TileRows;
    MOE_CUDA_REQUIRE(kInt4TileRows * p.up_segs * 2 * max_t <= kPartialFloats,
                     "the fused decode path's int4 gate+up phase cannot reduce a hidden size of " +
                         std::to_string(hidden) + " for " + std::to_string(n_tokens) +
                         " tokens in shared memory: lower MOE_DECODE_MAX_TOKENS");
  } else {
    const int64_t chunk_values = fp8 ? 16 : 8;  // weight values per 16-byte chunk
    p.up_segs = static_cast<int>((hidden / chunk_values + kUpSegChunks - 1) / kUpSegChunks);
    p.down_segs = static_cast<int>(
        (std::max(w.intermediate, w.shared_intermediate) / chunk_values + kDownSegChunks - 1) / kDownSegChunks);
  }
  MOE_CUDA_REQUIRE(task_rows * n_tokens * n_slots * p.down_segs <= kPartialFloats,
                   "the fused decode path's down phase cannot reduce " + std::to_string(n_tokens) +
                       " tokens of k = " + std::to_string(c.top_k) + " in shared memory: lower MOE_DECODE_MAX_TOKENS");
  p.prefetch_bytes = static_cast<int>(decode_prefetch_bytes());
  p.logit_parts = scratch.logit_parts;
  p.act = scratch.act;
  p.act_stride = scratch.act_stride;
  p.barrier = scratch.barrier;
  p.expert_counts = scratch.expert_counts;
  p.dropped = scratch.dropped;
  p.out = out;
  p.topk_ids = topk_ids;
  p.topk_weights = topk_weights;
  p.trace = g_trace;
  const auto run = [&]<Format F>() {
    if (n_tokens == 1) launch<1, F>(p, stream);
    else if (n_tokens == 2) launch<2, F>(p, stream);
    else if (n_tokens <= 4) launch<4, F>(p, stream);
    else launch<8, F>(p, stream);
  };
  if (int4) run.template operator()<Format::int4>();
  else if (fp8) run.template operator()<Format::fp8>();
  else run.template operator()<Format::bf16>();
}

void decode_trace(bool on) {
  if (on && g_trace == nullptr) {
    g_trace_blocks = device_limits().sms;
    MOE_CUDA_CHECK(cudaMalloc(&g_trace, size_t{8} * g_trace_blocks * kDecodeTracePoints));
  } else if (!on && g_trace != nullptr) {
    MOE_CUDA_CHECK(cudaFree(g_trace));
    g_trace = nullptr;
  }
}

std::vector<uint64_t> decode_trace_read() {
  std::vector<uint64_t> stamps(size_t(g_trace_blocks) * kDecodeTracePoints);
  if (g_trace == nullptr) return {};
  MOE_CUDA_CHECK(cudaDeviceSynchronize());
  MOE_CUDA_CHECK(cudaMemcpy(stamps.data(), g_trace, stamps.size() * 8, cudaMemcpyDeviceToHost));
  return stamps;
}

}  // namespace moe::cuda
