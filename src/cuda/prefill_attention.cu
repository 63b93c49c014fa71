// Tiled paged attention for prefill: a block takes 64 query rows of one query head, stages each tile of 64
// keys and values in shared memory as bf16, and runs both products on the tensor cores (wmma m16n16k16)
// with an fp32 online softmax (running max and sum per row). Every key is then read once per 64 query rows
// instead of once per row, which is what makes a long prompt's causal triangle cheap. Queries, keys and
// values are bf16 values already (the pools hold bf16 rows widened), so only the probabilities lose
// precision in bf16: they go in as a bf16 pair (hi + lo, about 16 bits), which keeps the small fixture
// models' logits as close to the CPU's as the fp32 kernel does.
#include <mma.h>

#include <cstdint>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"

namespace moe::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTileRows = 64, kTileKeys = 64, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = kTileRows / kWarps;
constexpr int64_t kMaxHead = 256;
// NOTE: rows padded by 8 bf16 (4 floats) so that the 16 rows a fragment reads fall in different banks.
constexpr int kPadBf16 = 8, kPadF32 = 4;

// Byte offsets of the shared-memory regions, each 128-byte aligned (wmma wants 32).
struct SharedLayout {
  int ld_q, ld_k, ld_v, ld_s, ld_p, ld_o;
  size_t q, k, v, s, o, meta, bytes;
};

__host__ __device__ inline size_t round_up(size_t x) {
  return (x + 127) / 128 * 128;
}

__host__ __device__ inline SharedLayout shared_layout(int64_t dk, int64_t dv) {
  SharedLayout l{};
  l.ld_q = l.ld_k = static_cast<int>(dk) + kPadBf16;
  l.ld_v = static_cast<int>(dv) + kPadBf16;
  l.ld_s = kTileKeys + kPadF32;
  l.ld_p = 2 * l.ld_s;  // P (hi | lo) [64][2 · 64] bf16 overlays S, row for row
  l.ld_o = static_cast<int>(dv) + kPadF32;
  l.q = 0;
  l.k = round_up(l.q + sizeof(bf16) * kTileRows * l.ld_q);
  l.v = round_up(l.k + sizeof(bf16) * kTileKeys * l.ld_k);
  l.s = round_up(l.v + sizeof(bf16) * kTileKeys * l.ld_v);
  l.o = round_up(l.s + sizeof(float) * kTileRows * l.ld_s);
  l.meta = round_up(l.o + sizeof(float) * kTileRows * l.ld_o);
  l.bytes = l.meta + sizeof(int64_t) * kTileKeys + sizeof(int32_t) * 3 * kTileRows + 16;
  return l;
}

// Pool rows slot[i] (i < 64; -1: a key past the segment's, staged as 0), columns [offset, offset + width)
// -> tile [64][ld] bf16. NOTE: a thread issues kLoadsInFlight loads before it converts any, so that their
// L2 latencies overlap instead of adding up.
constexpr int kLoadsInFlight = 4;
__device__ void stage_tile(const float* __restrict__ pool, int64_t row, int64_t offset, int width,
                           const int64_t* slot, bf16* tile, int ld) {
  const int quads = width / 4, total = kTileKeys * quads;
  for (int base = threadIdx.x; base < total; base += kThreads * kLoadsInFlight) {
    float4 x[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int idx = base + u * kThreads, i = idx / quads, c = 4 * (idx - i * quads);
      x[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (idx < total && slot[i] >= 0)
        x[u] = *reinterpret_cast<const float4*>(pool + slot[i] * row + offset + c);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int idx = base + u * kThreads, i = idx / quads, c = 4 * (idx - i * quads);
      if (idx >= total) break;
      auto* dst = reinterpret_cast<__nv_bfloat162*>(tile + i * ld + c);
      dst[0] = __floats2bfloat162_rn(x[u].x, x[u].y);
      dst[1] = __floats2bfloat162_rn(x[u].z, x[u].w);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 2) prefill_attention_kernel(PagedAttentionArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const SharedLayout l = shared_layout(a.dk, a.dv);
  bf16* Qs = reinterpret_cast<bf16*>(smem + l.q);
  bf16* Ks = reinterpret_cast<bf16*>(smem + l.k);
  bf16* Vs = reinterpret_cast<bf16*>(smem + l.v);
  float* S = reinterpret_cast<float*>(smem + l.s);
  bf16* P = reinterpret_cast<bf16*>(smem + l.s);  // row r's hi at [r][0, 64), lo at [r][64, 128)
  float* O = reinterpret_cast<float*>(smem + l.o);
  int64_t* key_slot = reinterpret_cast<int64_t*>(smem + l.meta);           // [64] pool rows of the key tile
  int32_t* tile_table = reinterpret_cast<int32_t*>(key_slot + kTileKeys);  // [64] row_table of the rows
  int32_t* tile_visible = tile_table + kTileRows;   // [64] row_visible of the tile's rows
  int32_t* seg_visible = tile_visible + kTileRows;  // [64] 0 outside the current segment
  int32_t* seg = seg_visible + kTileRows;           // [end, max visible]

  // NOTE: the last tiles see the most keys; launching them first evens out the tail.
  const int64_t r0 = int64_t{gridDim.x - 1 - blockIdx.x} * kTileRows, head = blockIdx.y;
  const int64_t kv_head = head / (a.heads / a.kv_heads);
  const int64_t tile_rows = a.rows - r0 < kTileRows ? a.rows - r0 : kTileRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int64_t idx = threadIdx.x; idx < kTileRows * a.dk; idx += kThreads) {
    const int64_t i = idx / a.dk, d = idx % a.dk;
    Qs[i * l.ld_q + d] = i < tile_rows ? a.q[((r0 + i) * a.heads + head) * a.dk + d] : __float2bfloat16(0.0f);
  }
  if (threadIdx.x < kTileRows) {
    const bool in = threadIdx.x < tile_rows;
    tile_table[threadIdx.x] = in ? a.row_table[r0 + threadIdx.x] : -1;
    tile_visible[threadIdx.x] = in ? a.row_visible[r0 + threadIdx.x] : 0;
  }
  __syncthreads();

  // A segment: a run of the tile's rows of one sequence (one block table); a prefill tile is one segment.
  for (int64_t begin = 0; begin < tile_rows;) {
    if (threadIdx.x == 0) {
      int64_t end = begin;
      int32_t most = 0;
      while (end < tile_rows && tile_table[end] == tile_table[begin]) {
        most = max(most, tile_visible[end]);
        ++end;
      }
      seg[0] = static_cast<int32_t>(end);
      seg[1] = most;
    }
    __syncthreads();
    const int64_t end = seg[0], visible = seg[1];
    if (threadIdx.x < kTileRows)
      seg_visible[threadIdx.x] = threadIdx.x >= begin && threadIdx.x < end ? tile_visible[threadIdx.x] : 0;
    for (int64_t idx = threadIdx.x; idx < kTileRows * a.dv; idx += kThreads)
      O[(idx / a.dv) * l.ld_o + idx % a.dv] = 0.0f;
    const int32_t* table = a.block_tables + tile_table[begin];
    float running_max[kRowsPerWarp], sum[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      running_max[i] = -INFINITY;
      sum[i] = 0.0f;
    }

    for (int64_t j0 = 0; j0 < visible; j0 += kTileKeys) {
      if (threadIdx.x < kTileKeys) {
        const int64_t j = j0 + threadIdx.x;
        key_slot[threadIdx.x] =
            j < visible ? int64_t{table[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens : -1;
      }
      __syncthreads();
      stage_tile(a.keys, a.kv_heads * a.dk, kv_head * a.dk, static_cast<int>(a.dk), key_slot, Ks, l.ld_k);
      stage_tile(a.values, a.kv_heads * a.dv, kv_head * a.dv, static_cast<int>(a.dv), key_slot, Vs, l.ld_v);
      __syncthreads();

      // S [64 rows, 64 keys] = Q Kᵀ: 16 fragments, 2 a warp.
      for (int f = warp; f < (kTileRows / 16) * (kTileKeys / 16); f += kWarps) {
        const int mi = f / (kTileKeys / 16), ni = f % (kTileKeys / 16);
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int64_t k = 0; k < a.dk; k += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> qa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kb;
          wmma::load_matrix_sync(qa, Qs + mi * 16 * l.ld_q + k, l.ld_q);
          wmma::load_matrix_sync(kb, Ks + ni * 16 * l.ld_k + k, l.ld_k);
          wmma::mma_sync(acc, qa, kb, acc);
        }
        wmma::store_matrix_sync(S + mi * 16 * l.ld_s + ni * 16, acc, l.ld_s, wmma::mem_row_major);
      }
      __syncthreads();

      // Online softmax: a warp owns rows [8 warp, 8 warp + 8), its lanes two keys each.
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        const int64_t row_visible = seg_visible[r];
        float s[2];
        for (int c = 0; c < 2; ++c) {
          const int key = 2 * lane + c;
          s[c] = j0 + key < row_visible ? S[r * l.ld_s + key] * a.scale : -INFINITY;
        }
        float tile_max = fmaxf(s[0], s[1]);
        for (int o = 16; o > 0; o >>= 1)
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
        const float new_max = fmaxf(running_max[i], tile_max);
        // NOTE: a row that has seen no key yet (or lies outside the segment) keeps max -inf and weighs 0.
        const bool none = new_max == -INFINITY;
        const float p0 = none ? 0.0f : __expf(s[0] - new_max), p1 = none ? 0.0f : __expf(s[1] - new_max);
        const float correction = none ? 1.0f : __expf(running_max[i] - new_max);
        float tile_sum = p0 + p1;
        for (int o = 16; o > 0; o >>= 1) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, o);
        running_max[i] = new_max;
        sum[i] = sum[i] * correction + tile_sum;
        // NOTE: P's row overlays S's row r; every lane has read its scores (the shuffles above), and no
        // other warp touches row r.
        __syncwarp();
        const __nv_bfloat162 hi = __floats2bfloat162_rn(p0, p1);
        const __nv_bfloat162 lo = __floats2bfloat162_rn(p0 - __low2float(hi), p1 - __high2float(hi));
        *reinterpret_cast<__nv_bfloat162*>(P + r * l.ld_p + 2 * lane) = hi;
        *reinterpret_cast<__nv_bfloat162*>(P + r * l.ld_p + kTileKeys + 2 * lane) = lo;
        for (int64_t c = lane; c < a.dv; c += 32) O[r * l.ld_o + c] *= correction;
      }
      __syncthreads();

      // O [64 rows, dv] += (P hi + P lo) V: 4 · dv/16 fragments over the warps.
      const int col_frags = static_cast<int>(a.dv / 16);
      for (int f = warp; f < (kTileRows / 16) * col_frags; f += kWarps) {
        const int mi = f / col_frags, ni = f % col_frags;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        float* o = O + mi * 16 * l.ld_o + ni * 16;
        wmma::load_matrix_sync(acc, o, l.ld_o, wmma::mem_row_major);
#pragma unroll
        for (int k = 0; k < kTileKeys; k += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> hi, lo;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vb;
          wmma::load_matrix_sync(hi, P + mi * 16 * l.ld_p + k, l.ld_p);
          wmma::load_matrix_sync(lo, P + mi * 16 * l.ld_p + kTileKeys + k, l.ld_p);
          wmma::load_matrix_sync(vb, Vs + k * l.ld_v + ni * 16, l.ld_v);
          wmma::mma_sync(acc, hi, vb, acc);
          wmma::mma_sync(acc, lo, vb, acc);
        }
        wmma::store_matrix_sync(o, acc, l.ld_o, wmma::mem_row_major);
      }
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      if (r < begin || r >= end) continue;
      const float inverse = sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f;
      bf16* out = a.out + ((r0 + r) * a.heads + head) * a.dv;
      for (int64_t c = lane; c < a.dv; c += 32) out[c] = __float2bfloat16(O[r * l.ld_o + c] * inverse);
    }
    begin = end;
    __syncthreads();
  }
}

}  // namespace

bool prefill_attention_fits(const PagedAttentionArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.dk % 16 == 0 && a.dv % 16 == 0 && a.dk <= kMaxHead && a.dv <= kMaxHead && aligned(a.keys) &&
         aligned(a.values);
}

void prefill_attention(const PagedAttentionArgs& args, cudaStream_t stream) {
  // NOTE: opted in once to the largest layout (dk = dv = 256); a launch asks only for what its heads need.
  static const bool opted_in = [] {
    MOE_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared_layout(kMaxHead, kMaxHead).bytes)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((args.rows + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>(args.heads));
  prefill_attention_kernel<<<grid, kThreads, shared_layout(args.dk, args.dv).bytes, stream>>>(args);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
