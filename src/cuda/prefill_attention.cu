// Tiled paged attention for prefill, flash-attention style on the tensor cores. A block takes the query
// heads of one KV head's group (or a divisor of the group, at most 8) over 16 query positions, or more
// position tiles where the group is smaller (8 warps in all): a warp owns 16 positions of one query head.
// Each tile of 64 keys and values is staged from the fp32 pools in shared memory as bf16 once for all of
// the block's warps (GQA: once per group, not once per query head), and both products run as mma.sync
// m16n8k16 with the scores, probabilities and output held in registers, under an fp32 online softmax per
// row. Queries, keys and values are bf16 values already (the pools hold bf16 rows widened), so only the
// probabilities lose precision in bf16: they go in as a bf16 pair (hi + lo, about 16 bits), which keeps the
// small fixture models' logits as close to the CPU's as the fp32 kernel does.
#include <cstdint>
#include <string>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/mma.cuh"

namespace moe::cuda {

namespace {

constexpr int kKeys = 64, kMaxWarps = 8, kRows = 16;
// NOTE: rows padded by 8 bf16 (16 bytes): the 8 rows a fragment load or ldmatrix phase reads then start in
// 8 different bank groups.
constexpr int kPad = 8;
constexpr int kLoadsInFlight = 4;

// Pool rows slot[i] (i < 64; -1: a key past the segment's, staged as 0), columns [offset, offset + D) ->
// tile [64][D + kPad] bf16. NOTE: a thread issues kLoadsInFlight loads before it converts any, so that
// their L2 latencies overlap instead of adding up.
template <int D>
__device__ void stage_tile(const float* __restrict__ pool, int64_t row, int64_t offset, const int64_t* slot,
                           bf16* tile) {
  constexpr int kQuads = D / 4, kTotal = kKeys * kQuads;
  for (int base = threadIdx.x; base < kTotal; base += blockDim.x * kLoadsInFlight) {
    float4 x[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int idx = base + u * blockDim.x, i = idx / kQuads, c = 4 * (idx % kQuads);
      x[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (idx < kTotal && slot[i] >= 0) x[u] = *reinterpret_cast<const float4*>(pool + slot[i] * row + offset + c);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int idx = base + u * blockDim.x, i = idx / kQuads, c = 4 * (idx % kQuads);
      if (idx >= kTotal) break;
      auto* dst = reinterpret_cast<__nv_bfloat162*>(tile + i * (D + kPad) + c);
      dst[0] = __floats2bfloat162_rn(x[u].x, x[u].y);
      dst[1] = __floats2bfloat162_rn(x[u].z, x[u].w);
    }
  }
}

__device__ __forceinline__ unsigned pack(__nv_bfloat162 x) { return *reinterpret_cast<unsigned*>(&x); }

// Probabilities (x, y) as the bf16 pair hi + lo of an A fragment register each.
__device__ __forceinline__ void split(float x, float y, unsigned& hi, unsigned& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  hi = pack(h);
  lo = pack(__floats2bfloat162_rn(x - __low2float(h), y - __high2float(h)));
}

// dk = dv = D. heads_per_block query heads (of one KV head) x position_tiles tiles of 16 positions.
template <int D>
__global__ void __launch_bounds__(32 * kMaxWarps, 1)
    prefill_attention_kernel(PagedAttentionArgs a, int heads_per_block, int position_tiles) {
  constexpr int LD = D + kPad, KSTEPS = D / 16, NTILES = D / 8;
  __shared__ __align__(16) bf16 Ks[kKeys * LD];
  __shared__ __align__(16) bf16 Vs[kKeys * LD];
  __shared__ int64_t key_slot[kKeys];
  __shared__ int32_t row_table[kRows * kMaxWarps], row_visible[kRows * kMaxWarps];
  __shared__ int32_t seg[2];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int block_rows = kRows * position_tiles;
  // NOTE: the last tiles see the most keys; launching them first evens out the tail.
  const int64_t r0 = int64_t{gridDim.x - 1 - blockIdx.x} * block_rows;
  const int64_t head = int64_t{blockIdx.y} * heads_per_block + warp % heads_per_block;
  const int64_t kv_head = int64_t{blockIdx.y} * heads_per_block / (a.heads / a.kv_heads);
  const int tile_rows = static_cast<int>(a.rows - r0 < block_rows ? a.rows - r0 : block_rows);
  const int row_a = kRows * (warp / heads_per_block) + g, row_b = row_a + 8;  // the lane's rows in the block

  for (int i = threadIdx.x; i < block_rows; i += blockDim.x) {
    const bool in = i < tile_rows;
    row_table[i] = in ? a.row_table[r0 + i] : -1;
    row_visible[i] = in ? a.row_visible[r0 + i] : 0;
  }
  // The warp's queries as A fragments, for all of its k-steps.
  unsigned qf[KSTEPS][4];
  {
    const int64_t q_row = a.q_row > 0 ? a.q_row : a.heads * D;
    const bf16* qa = a.q + (r0 + row_a) * q_row + head * D + 2 * t;
    const bf16* qb = a.q + (r0 + row_b) * q_row + head * D + 2 * t;
    const bool in_a = row_a < tile_rows, in_b = row_b < tile_rows;
#pragma unroll
    for (int k = 0; k < KSTEPS; ++k) {
      qf[k][0] = in_a ? *reinterpret_cast<const unsigned*>(qa + 16 * k) : 0u;
      qf[k][1] = in_b ? *reinterpret_cast<const unsigned*>(qb + 16 * k) : 0u;
      qf[k][2] = in_a ? *reinterpret_cast<const unsigned*>(qa + 16 * k + 8) : 0u;
      qf[k][3] = in_b ? *reinterpret_cast<const unsigned*>(qb + 16 * k + 8) : 0u;
    }
  }
  float o[NTILES][4];
#pragma unroll
  for (int n = 0; n < NTILES; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  // Per row (a, b): running max of the scaled scores (log2 units) and this lane's part of the sum.
  float run_max[2] = {-INFINITY, -INFINITY}, run_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = a.scale * 1.4426950408889634f;
  __syncthreads();

  // A segment: a run of the block's rows of one sequence (one block table). A row outside the current
  // segment sees no key in it: its scores are masked, so its running state carries through unchanged.
  for (int begin = 0; begin < tile_rows;) {
    if (threadIdx.x == 0) {
      int end = begin;
      int32_t most = 0;
      while (end < tile_rows && row_table[end] == row_table[begin]) {
        most = max(most, row_visible[end]);
        ++end;
      }
      seg[0] = end;
      seg[1] = most;
    }
    __syncthreads();
    const int end = seg[0];
    const int32_t visible = seg[1];
    const int32_t* table = a.block_tables + row_table[begin];
    const int32_t vis_a = row_a >= begin && row_a < end ? row_visible[row_a] : 0;
    const int32_t vis_b = row_b >= begin && row_b < end ? row_visible[row_b] : 0;
    const int32_t warp_visible = static_cast<int32_t>(__reduce_max_sync(0xffffffffu, max(vis_a, vis_b)));

    for (int32_t j0 = 0; j0 < visible; j0 += kKeys) {
      if (threadIdx.x < kKeys) {
        const int64_t j = j0 + threadIdx.x;
        key_slot[threadIdx.x] =
            j < visible ? int64_t{table[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens : -1;
      }
      __syncthreads();  // also: every warp is done with the previous tile
      stage_tile<D>(a.keys, a.kv_heads * D, kv_head * D, key_slot, Ks);
      stage_tile<D>(a.values, a.kv_heads * D, kv_head * D, key_slot, Vs);
      __syncthreads();
      if (j0 >= warp_visible) continue;  // warp-uniform: none of the warp's rows sees these keys

      // S [16 rows, 64 keys] = Q Kᵀ: 8 n-tiles of 8 keys.
      float s[kKeys / 8][4];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        const bf16* kp = Ks + (8 * n + g) * LD + 2 * t;
#pragma unroll
        for (int k = 0; k < KSTEPS; ++k)
          mma_bf16(s[n], qf[k], *reinterpret_cast<const unsigned*>(kp + 16 * k),
                   *reinterpret_cast<const unsigned*>(kp + 16 * k + 8));
      }
      // Online softmax over the tile: mask, scale, the rows' maxima over their quad of lanes.
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int32_t j = j0 + 8 * n + 2 * t + c;
          s[n][c] = j < vis_a ? s[n][c] * scale_log2 : -INFINITY;
          s[n][2 + c] = j < vis_b ? s[n][2 + c] * scale_log2 : -INFINITY;
          tile_max[0] = fmaxf(tile_max[0], s[n][c]);
          tile_max[1] = fmaxf(tile_max[1], s[n][2 + c]);
        }
      float correction[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        const float new_max = fmaxf(run_max[r], tile_max[r]);
        // NOTE: a row that has seen no key yet keeps max -inf: weight 1 for its (empty) state, p = 0.
        correction[r] = new_max == -INFINITY ? 1.0f : exp2f(run_max[r] - new_max);
        run_max[r] = new_max;
        run_sum[r] *= correction[r];
      }
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2;
          s[n][e] = run_max[r] == -INFINITY ? 0.0f : exp2f(s[n][e] - run_max[r]);
          run_sum[r] += s[n][e];
        }
#pragma unroll
      for (int n = 0; n < NTILES; ++n) {
        o[n][0] *= correction[0];
        o[n][1] *= correction[0];
        o[n][2] *= correction[1];
        o[n][3] *= correction[1];
      }

      // O [16 rows, D] += (P hi + P lo) V: P's accumulators of two n-tiles are the A fragment of 16 keys.
      const int matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
      for (int kc = 0; kc < kKeys / 16; ++kc) {
        unsigned hi[4], lo[4];
        split(s[2 * kc][0], s[2 * kc][1], hi[0], lo[0]);
        split(s[2 * kc][2], s[2 * kc][3], hi[1], lo[1]);
        split(s[2 * kc + 1][0], s[2 * kc + 1][1], hi[2], lo[2]);
        split(s[2 * kc + 1][2], s[2 * kc + 1][3], hi[3], lo[3]);
        // ldmatrix.trans of V [key][dim]: matrices (keys +0 | +8) x (dims +0 | +8) -> B of two n-tiles.
        const bf16* vp = Vs + (16 * kc + (matrix & 1) * 8 + matrix_row) * LD + (matrix >> 1) * 8;
#pragma unroll
        for (int np = 0; np < NTILES / 2; ++np) {
          unsigned b[4];
          ldmatrix_x4_trans(b, vp + 16 * np);
          mma_bf16(o[2 * np], hi, b[0], b[1]);
          mma_bf16(o[2 * np], lo, b[0], b[1]);
          mma_bf16(o[2 * np + 1], hi, b[2], b[3]);
          mma_bf16(o[2 * np + 1], lo, b[2], b[3]);
        }
      }
    }
    begin = end;
    __syncthreads();  // seg[] is rewritten for the next segment
  }

  float inverse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float total = run_sum[r];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    inverse[r] = total > 0.0f ? 1.0f / total : 0.0f;
  }
  const int rows[2] = {row_a, row_b};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= tile_rows) continue;
    bf16* out = a.out + ((r0 + rows[r]) * a.heads + head) * D + 2 * t;
#pragma unroll
    for (int n = 0; n < NTILES; ++n)
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * n) =
          __floats2bfloat162_rn(o[n][2 * r] * inverse[r], o[n][2 * r + 1] * inverse[r]);
  }
}

// The largest divisor of the group size that is at most kMaxWarps: the query heads a block takes.
int heads_per_block(int64_t group) {
  for (int h = kMaxWarps; h > 1; --h)
    if (group % h == 0) return h;
  return 1;
}

template <int D>
void launch(const PagedAttentionArgs& args, cudaStream_t stream) {
  const int heads = heads_per_block(args.heads / args.kv_heads), tiles = kMaxWarps / heads;
  const dim3 grid(static_cast<unsigned>((args.rows + kRows * tiles - 1) / (kRows * tiles)),
                  static_cast<unsigned>(args.heads / heads));
  prefill_attention_kernel<D><<<grid, 32 * heads * tiles, 0, stream>>>(args, heads, tiles);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool prefill_attention_fits(const PagedAttentionArgs& a) {
  const auto aligned = [](const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return a.dk == a.dv && (a.dk == 16 || a.dk == 32 || a.dk == 64 || a.dk == 128) && aligned(a.keys, 16) &&
         aligned(a.values, 16) && aligned(a.q, 4) && aligned(a.out, 4) && a.q_row % 2 == 0;
}

void prefill_attention(const PagedAttentionArgs& args, cudaStream_t stream) {
  switch (args.dk) {
    case 16: launch<16>(args, stream); break;
    case 32: launch<32>(args, stream); break;
    case 64: launch<64>(args, stream); break;
    case 128: launch<128>(args, stream); break;
    default: MOE_CUDA_REQUIRE(false, "prefill_attention: head size " + std::to_string(args.dk) + " has no kernel");
  }
}

}  // namespace moe::cuda
