#pragma once
// CUDA ops of the MoE layer, one file each under src/cuda/ (same names as the CPU ops). Launchers take
// device pointers and a stream, never synchronise, and read data-dependent sizes (expert counts, tile
// counts) on the device only, so that a whole forward can be captured in a CUDA graph.
// bf16 data is passed as __nv_bfloat16 on the device; host code sees it through these opaque pointers.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cuda/grouped_gemm_plan.h"  // GroupedGemmKernel, WgmmaSchedule, the policy
#include "moe/routing/router.h"

namespace moe::cuda {

using bf16 = __nv_bfloat16;

// ---- router.cu -------------------------------------------------------------------------------------
// Scores + top-k of every routing method, one warp per token, after the gate GEMM.
//   logits [T, logits_stride] fp32 (the first E columns are the router's), bias [E] fp32 or null
//   -> topk_ids [T, k] int32 (best first, ties to the lower index), topk_weights [T, k] fp32.
// logit_parts > 1 (RouterGemm's parts): a token's row holds that many parts of logits_stride / logit_parts
// columns side by side, whose sum (in order, fp32) is its logits; the sums are written over the first part,
// where later readers (the Qwen2 shared-expert gate logit) take them.
// Limits: E <= 1024, k <= 32, n_group <= 32.
void router_topk(const routing::RouterConfig& config, float* logits, int64_t logits_stride, int logit_parts,
                 const float* correction_bias, int64_t n_tokens, int32_t* topk_ids, float* topk_weights,
                 cudaStream_t stream);

// Small batches: the gate GEMV (fp32 gate [gate_rows, hidden], x bf16 [T, hidden]) and the top-k in one
// launch; logits [T, gate_rows] are written too (the Qwen2 shared-expert gate logit is row E).
// arrivals [ceil(T / 8)] must be zero before the first call (the kernel leaves it zero).
void router_fused(const routing::RouterConfig& config, const bf16* x, int64_t hidden, const float* gate,
                  int64_t gate_rows, const float* correction_bias, int64_t n_tokens, float* logits,
                  unsigned* arrivals, int32_t* topk_ids, float* topk_weights, cudaStream_t stream);

void f32_to_bf16(const float* x, bf16* x_bf16, int64_t n, cudaStream_t stream);

// ---- permute.cu ------------------------------------------------------------------------------------
// The expert-major layout of the T*k pairs, built on the device:
//   segments: expert e owns rows [expert_offsets[e], expert_offsets[e] + expert_counts[e])
//   row_token [n_rows]: the token of each row (-1 for unused rows of the padded layout)
//   pair_rows [T*k]: row of pair (t, j), -1 where dropped; pair_weights [T*k] the combine weight
// and the tile map of the grouped GEMM: tiles of `tile_rows` rows never straddle two experts.
struct PermuteBuffers {
  int32_t* expert_counts;    // [E] pairs routed to each expert (before capacity)
  int32_t* count_prefix;     // [E] pairs of the experts before e (exclusive scan of expert_counts)
  int32_t* expert_offsets;   // [E] first row of each segment
  int32_t* segment_counts;   // [E] rows filled in each segment (min(count, capacity) in the padded layout)
  int32_t* dropped;          // [E] pairs beyond capacity
  int32_t* pair_rank;        // [T*k] scratch: a pair's rank inside its expert within its chunk (large batches)
  int32_t* chunk_counts;     // [permute_chunk_count(T*k) * E] scratch: each chunk's pairs per expert
  int32_t* row_token;        // [n_rows]
  int32_t* pair_rows;        // [T*k]
  float* pair_weights;       // [T*k]
};

// The chunks that the permute of a large batch of up to max_pairs pairs splits it into (chunk_counts' rows).
int64_t permute_chunk_count(int64_t max_pairs);

// The grouped GEMM's tile map: tiles of `tile_rows` rows that never straddle two segments;
// tile i covers rows [tile_row[i], tile_row[i] + tile_rows) of expert tile_expert[i], for i < *n_tiles.
// tall_rows > 0 (the wgmma kernel's tall tiles): a segment's last tile also takes the rows after it when
// at most tall_rows are left, instead of a tile of its own for them (a segment of 2 * tile_rows + 5 rows
// gets two tiles, the second of tile_rows + 5 rows).
// even_tiles (the wgmma kernel's pairs of tiles): a segment with an odd number of tiles gets one more, empty
// (it starts at the segment's end), so that tiles 2i and 2i + 1 always belong to one segment.
struct TileMap {
  int tile_rows;
  int32_t* tile_expert;  // [max_tiles]
  int32_t* tile_row;     // [max_tiles]
  int32_t* n_tiles;      // [1]
  int64_t max_tiles;
  int tall_rows = 0;
  bool even_tiles = false;
};

// capacity < 0: contiguous layout (n_rows = T*k). capacity >= 0: padded layout (n_rows = E*capacity),
// first-come in token order; `renormalize` rescales each token's kept weights to its original sum.
// Also builds the tile map of the segments. A stable counting sort: small batches (E <= 256, T*k <= 16384)
// take one launch, larger ones two over chunks of pairs.
void permute(const int32_t* topk_ids, const float* topk_weights, int64_t n_tokens, int top_k, int n_experts,
             int64_t capacity, bool renormalize, const PermuteBuffers& buffers, const TileMap& tiles,
             cudaStream_t stream);

// One segment of n_rows rows at row 0 (a dense MLP, e.g. the shared experts, through the grouped GEMM).
void dense_segment(int32_t* segment_offsets, int32_t* segment_counts, int64_t n_rows, cudaStream_t stream);

// The tile map of arbitrary segments (offsets, counts) into `tiles`' arrays (max_tiles bounds them).
void build_tiles(const int32_t* segment_offsets, const int32_t* segment_counts, int n_experts, const TileMap& tiles,
                 cudaStream_t stream);
// The same, plain tiles of tile_rows.
void build_tiles(const int32_t* segment_offsets, const int32_t* segment_counts, int n_experts, int tile_rows,
                 int32_t* tile_expert, int32_t* tile_row, int32_t* n_tiles, int64_t max_tiles, cudaStream_t stream);

// ---- grouped_gemm.cu -------------------------------------------------------------------------------
// Grouped GEMMs over expert segments, bf16 inputs, fp32 accumulation (mma.sync tensor cores); or FP8 W8A8
// (e4m3 activations and weights, both block-scaled) where b_fp8 is set.
struct GroupedGemmArgs {
  const bf16* a;              // rows of A, [*, K]; row r of segment e is a[gather ? gather[r] : r]
  const int32_t* gather;      // optional row map (the token of each row), null for identity
  const bf16* b;              // [E, N_b, K] expert weights, K contiguous
  bf16* c;                    // [n_rows, N_c] output rows (same row order as the segments)
  const int32_t* segment_offsets;  // [E]
  const int32_t* segment_counts;   // [E]
  const int32_t* tile_expert;      // tile map from build_tiles
  const int32_t* tile_row;
  const int32_t* n_tiles;
  int64_t max_tiles;
  int64_t k;                  // inner size (multiple of 32)
  int64_t n;                  // output columns (SwiGLU: I; b holds 2I rows, gate then up)
  // The extents the wgmma kernel's tensor maps need (the mma.sync kernels ignore them).
  int64_t n_experts = 0;      // experts in b
  int64_t a_rows = 0;         // rows of a
  // The wgmma kernel's work-unit queue: wgmma_scheduler_ints() ints, zeroed once by the owner (cudaMemset);
  // every launch leaves them zeroed again, so launches that share it must run in stream order.
  int32_t* scheduler = nullptr;
  // The tile map's tall_rows (TileMap): 0, or wgmma_tall_rows() for the wgmma kernel, whose tall tiles run
  // their extra rows as a small GEMM beside the 128-row one on the same weight tile.
  int32_t tall_rows = 0;
  // The tile map and the segment arrays were complete before the kernel just before this one in the stream
  // passed its grid wait (it is a launch_dependent kernel that waits before it lets this one launch: the
  // down GEMM after the gate/up GEMM). The mma.sync kernel then reads them and streams its first weight
  // stages before its own grid wait. Only A must wait for the previous kernel.
  bool tile_map_settled = false;
  // The next kernel in the stream is a GEMM with tile_map_settled: this (mma.sync) kernel lets it launch right
  // after its own grid wait instead of after its main loop, so that its blocks take the SMs this one's last
  // wave leaves and stream their first weight stages meanwhile.
  bool early_dependent_launch = false;
  // The wgmma kernel's staged epilogue as tuned for this GEMM (grouped_gemm_plan.h); unset: the policy's
  // (wgmma_schedule_for). The environment's override still wins.
  std::optional<bool> staged_epilogue = std::nullopt;
  // FP8 W8A8 (mma.sync kernels only, fp8_grouped_gemm_available; k a multiple of 128, tiles of at most 64
  // rows): a_fp8 / b_fp8 replace a / b, row for row, as e4m3 bytes. a_scale [a's rows, k / 128]: one scale
  // per row and 128-value group (quantize_rows_fp8); b_scale [mats, ceil(n / 128), k / 128]: one per 128x128
  // weight block, SwiGLU's gate and up rows blocked apart (mats = 2E: expert e's gate is 2e, its up 2e + 1;
  // Fp8Mlps' layout). Out, silu and the fp32 accumulation are the bf16 kernels'.
  const uint8_t* a_fp8 = nullptr;
  const float* a_scale = nullptr;
  const uint8_t* b_fp8 = nullptr;
  const float* b_scale = nullptr;
};

// Whether the GPU runs the fp8 grouped GEMMs (compute capability 8.9 or later, and the build has code for it).
bool fp8_grouped_gemm_available();

// c[r, :] = silu(a_r · gateᵀ) ⊙ (a_r · upᵀ), b = [E, 2n, k] (rows 0..n-1 gate, n..2n-1 up).
void grouped_gemm_swiglu(const GroupedGemmArgs& args, int tile_rows, cudaStream_t stream);
// c[r, :] = a_r · bᵀ, b = [E, n, k].
void grouped_gemm(const GroupedGemmArgs& args, int tile_rows, cudaStream_t stream);

// ---- sm90_grouped_gemm.cu (the schedule: grouped_gemm_plan.h) -------------------------------------
// Hopper (sm_90a) prefill grouped GEMMs: a persistent kernel, TMA loads, wgmma, a warp-specialised
// producer/consumer pipeline over (row tile, column tile) work units; tiles of 128 rows from a tile map
// built with tile_rows = 128; a must be contiguous rows (gather == null; see gather_rows), n_experts and
// a_rows set; k and the row strides multiples of 8. Same results as grouped_gemm_swiglu / grouped_gemm.
bool wgmma_grouped_gemm_available();  // built for sm_90a and the current GPU is compute capability 9.0
// The ints of GroupedGemmArgs::scheduler.
int64_t wgmma_scheduler_ints();
// With the schedule that wgmma_schedule_for(args.a_rows, args.n_experts, gate_up, args.k,
// args.staged_epilogue) picks, or the one given.
void wgmma_grouped_gemm_swiglu(const GroupedGemmArgs& args, cudaStream_t stream);
void wgmma_grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream);
void wgmma_grouped_gemm_swiglu(const GroupedGemmArgs& args, cudaStream_t stream, WgmmaSchedule schedule);
void wgmma_grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream, WgmmaSchedule schedule);

// ---- gather_rows.cu --------------------------------------------------------------------------------
// out[r, :] = x[row_token[r], :] for r < n_rows (zeros where row_token[r] < 0); cols a multiple of 8.
void gather_rows(const bf16* x, const int32_t* row_token, int64_t n_rows, int64_t cols, bf16* out,
                 cudaStream_t stream);
// The same copy in token order: out[pair_rows[t * top_k + j], :] = x[t, :] for every pair whose row is >= 0
// (rows of no pair are left as they are); x comes from DRAM about once where it does not fit in L2.
void gather_pair_rows(const bf16* x, const int32_t* pair_rows, int64_t n_tokens, int top_k, int64_t cols,
                      bf16* out, cudaStream_t stream);

// ---- unpermute.cu ----------------------------------------------------------------------------------
// out[t] = sum_j pair_weights[t, j] * rows[pair_rows[t, j]] (+ shared_scale[t] * shared[t] when shared is
// given; shared_scale null means 1). Deterministic: fixed order, no atomics. rows/shared bf16, out fp32.
void unpermute(const bf16* rows, const int32_t* pair_rows, const float* pair_weights, int64_t n_tokens,
               int top_k, int64_t hidden, const bf16* shared, const float* shared_gate_logit,
               int64_t shared_gate_stride, float* out, cudaStream_t stream);

// ---- fp8_block.cu ----------------------------------------------------------------------------------
// quant/fp8_block.h's quantize_fp8_block on the device, bit for bit: w [mats, rows, cols] bf16 ->
// values [mats, rows, cols] e4m3 and scales [mats, ceil(rows / 128), ceil(cols / 128)] fp32 (weight =
// e4m3 x scale, scale = amax / 448 per 128x128 block, 1 for an all-zero block). *non_finite is set to 1
// where a block holds a NaN or an Inf (and left alone otherwise); mats <= 65535.
void quantize_fp8_block(const bf16* w, int64_t mats, int64_t rows, int64_t cols, uint8_t* values, float* scales,
                        int* non_finite, cudaStream_t stream);
// The W8A8 path's activations, quant::quantize_fp8_activations bit for bit: x [rows, cols] bf16 -> values
// [rows, cols] e4m3 and scales [rows, cols / 128] fp32 (scale = amax / 448 per row and 128-value group, 1
// for an all-zero group); cols a multiple of 128. A launch_dependent kernel (it waits for x's writer).
void quantize_rows_fp8(const bf16* x, int64_t rows, int64_t cols, uint8_t* values, float* scales,
                       cudaStream_t stream);

// ---- int4_group.cu ---------------------------------------------------------------------------------
// quant/int4_awq.h's quantize_awq_int4 on the device, bit for bit (the same q, zero points and f16 scales),
// into int4_tiles.h's layout: w [rows, cols] bf16 (rows a multiple of 16, cols of 128) -> values
// [rows * cols / 2] bytes and scale_zero [rows * cols / 128]. *non_finite is set to 1 where a group holds a
// NaN or an Inf (and left alone otherwise).
void quantize_int4_tiles(const bf16* w, int64_t rows, int64_t cols, uint8_t* values, uint32_t* scale_zero,
                         int* non_finite, cudaStream_t stream);

// ---- decode.cu -------------------------------------------------------------------------------------
// The fused decode path: the whole layer for up to kDecodeMaxTokens tokens in one persistent launch (one
// block per SM, grid-wide barriers between its phases): router GEMV (fp32, as router_fused) and top-k of
// every routing method, gate+up+SwiGLU of the distinct chosen experts and the shared expert, then down with
// the weighted sum, deterministic (fixed-order sums, no atomics on data). Contiguous paradigm only (no
// capacity). out [T, H] fp32, topk_ids / topk_weights [T, k]; the load counters (expert_counts: pairs per
// expert, dropped: zeros) are written as permute writes them.
constexpr int64_t kDecodeMaxTokens = 8;

struct DecodeWeights {
  const float* gate;               // [gate_rows, H] fp32: E expert rows (+ the Qwen2 shared expert gate row)
  int64_t gate_rows;
  const float* correction_bias;    // [E] or null
  const bf16* w13;                 // [E, 2I, H] gate rows then up rows
  const bf16* w2;                  // [E, H, I]
  int64_t intermediate;            // I (multiple of 8)
  const bf16* shared_w13;          // [2S, H] or null
  const bf16* shared_w2;           // [H, S] or null
  int64_t shared_intermediate;     // S, 0 without a shared expert
  bool shared_gated;               // Qwen2-MoE: the shared expert is scaled by sigmoid(logit of gate row E)
  // FP8 experts (fp8_block.cu's format), streamed instead of w13 / w2 where w13_fp8 is set (and then the
  // shared expert's too, if any): e4m3 values in the bf16 layouts above, and fp32 scales per 128x128
  // block of each matrix: w13 [E, 2 (gate, up), ceil(I / 128), ceil(H / 128)], w2 [E, ceil(H / 128),
  // ceil(I / 128)], the shared ones likewise with one expert. Activations stay bf16 (W8A16).
  const uint8_t* w13_fp8 = nullptr;
  const float* w13_scale = nullptr;
  const uint8_t* w2_fp8 = nullptr;
  const float* w2_scale = nullptr;
  const uint8_t* shared_w13_fp8 = nullptr;
  const float* shared_w13_scale = nullptr;
  const uint8_t* shared_w2_fp8 = nullptr;
  const float* shared_w2_scale = nullptr;
  // INT4 experts (int4_tiles.h's layout: w13 as one [E * 2I, H] matrix, w2 as [E * H, I], the shared ones
  // [2S, H] and [H, S]), streamed instead of w13 / w2 where w13_int4 is set (and then the shared expert's
  // too), multiplied on tensor cores (m16n8k16, bf16 activations: W4A16). H, I and S multiples of 128.
  const uint8_t* w13_int4 = nullptr;
  const uint32_t* w13_scale_zero = nullptr;
  const uint8_t* w2_int4 = nullptr;
  const uint32_t* w2_scale_zero = nullptr;
  const uint8_t* shared_w13_int4 = nullptr;
  const uint32_t* shared_w13_scale_zero = nullptr;
  const uint8_t* shared_w2_int4 = nullptr;
  const uint32_t* shared_w2_scale_zero = nullptr;
};

struct DecodeScratch {
  float* logit_parts;      // decode_logit_parts(gate_rows, max_tokens) floats
  bf16* act;               // [max_tokens, act_stride]
  int64_t act_stride;      // decode_act_stride(...)
  unsigned* barrier;       // [1], zero before the first call (each call leaves it valid for the next)
  int32_t* expert_counts;  // [E]
  int32_t* dropped;        // [E]
};

// The most tokens the fused path is used for on this device and model (0: not supported), from the
// measured threshold (MOE_DECODE_MAX_TOKENS in the environment overrides it; 0 turns the path off). int4
// experts: up to kDecodeMaxTokens (their tensor-core tiles take 8 tokens for the time of one, and no other
// kernel reads them).
int64_t decode_token_limit(const routing::RouterConfig& config, int64_t hidden, int64_t gate_rows, bool int4 = false);
int64_t decode_act_stride(const routing::RouterConfig& config, int64_t intermediate, int64_t shared_intermediate,
                          int64_t max_tokens);
int64_t decode_logit_parts(int64_t gate_rows, int64_t max_tokens);
void decode_layer(const routing::RouterConfig& config, const DecodeWeights& weights, int64_t hidden, const bf16* x,
                  int64_t n_tokens, const DecodeScratch& scratch, float* out, int32_t* topk_ids, float* topk_weights,
                  cudaStream_t stream);
// Profiling: while on, every decode_layer launch has thread 0 of each block record %globaltimer (ns) at its
// phase boundaries: entry, x staged, router done, barrier 1 passed, token 0's logits loaded, token 0
// selected, routed, gate+up done, barrier 2 passed, exit. decode_trace_read synchronises and returns
// [blocks, kDecodeTracePoints] of the last launch.
constexpr int kDecodeTracePoints = 10;
void decode_trace(bool on);
std::vector<uint64_t> decode_trace_read();

}  // namespace moe::cuda
