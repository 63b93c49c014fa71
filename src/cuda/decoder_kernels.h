#pragma once
// CUDA ops of the decoder around the MoE blocks, one file each under src/cuda/ with the CPU op's name
// (embedding.cu, rms_norm.cu, rope.cu, clamp.cu, activation.cu, attention.cu, mla.cu; linear.h for the
// GEMMs; sampling.cu chooses tokens; random_fill.cu makes random weights). Launchers take device pointers
// and a stream (last), never synchronise and never allocate.
// Activations are bf16, the residual stream and the KV cache fp32; every reduction (norm statistics, q·k,
// softmax, GEMM sums) is fp32.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace moe::cuda {

using bf16 = __nv_bfloat16;

// ---- embedding.cu ----------------------------------------------------------------------------------
// out [n, hidden] fp32 = rows ids[i] of table [V, hidden] bf16 (ids checked by the caller).
void embedding(const bf16* table, int64_t hidden, const int32_t* ids, int64_t n, float* out,
               cudaStream_t stream);

// ---- rms_norm.cu -----------------------------------------------------------------------------------
// residual [rows, hidden] fp32 += delta (bf16 or fp32 [rows, hidden]; both null: nothing to add), then
// out [rows, hidden] bf16 = residual * rsqrt(mean(residual²) + eps) * weight [hidden] fp32.
void add_rms_norm(float* residual, const bf16* delta_bf16, const float* delta_f32, const float* weight,
                  int64_t rows, int64_t hidden, float eps, bf16* out, cudaStream_t stream);
// In place over x [rows, row_stride] bf16: `groups` groups of `width` columns from column 0 of each row,
// each normed by weight [width] fp32 (q/k norms per head: groups = heads; a whole row or MLA's latent
// prefix: groups = 1).
void rms_norm(bf16* x, int64_t rows, int64_t row_stride, int64_t groups, int64_t width, const float* weight,
              float eps, cudaStream_t stream);

// ---- rope.cu ---------------------------------------------------------------------------------------
enum class RopePairing : uint8_t { halves, pairs, pairs_to_halves };  // as cpu::RopePairing
struct RopeArgs {
  bf16* x;                                   // [rows, heads · head_stride] (row stride row_stride), in place
  int64_t rows, heads, head_stride, offset;  // columns [offset, offset + 2 · half) of each head
  const float* inv_freq;                     // [half], half <= 256
  int half;
  float attention_factor;  // multiplies cos and sin
  RopePairing pairing;
  const int64_t* positions;  // [rows]
  int64_t row_stride = 0;    // elements between rows; 0: heads · head_stride
};
void rope(const RopeArgs& args, cudaStream_t stream);

// ---- attention_inputs.cu ---------------------------------------------------------------------------
// The attention's inputs in one pass: per (row, head) of q and k, the head's RMSNorm (where weights are
// given), then RoPE over the whole head, written back in place; k's heads and v's into the pools at
// slots[row] (fp32 rows of kv_heads · head_dim; a slot of -1 is not written). The rounding to bf16 after the
// norm and after the rotation is the one rms_norm and rope make, so both paths give the same values.
struct AttentionInputsArgs {
  bf16* q;                                 // [rows, heads · head_dim], row stride q_row
  bf16* k;                                 // [rows, kv_heads · head_dim], row stride k_row
  const bf16* v;                           // [rows, kv_heads · head_dim], row stride v_row
  int64_t q_row, k_row, v_row;
  int64_t rows, heads, kv_heads, head_dim;  // head_dim = 2 · half (RoPE over the whole head)
  const float* q_norm;                      // [head_dim] or null: no norm
  const float* k_norm;                      // [head_dim] or null
  float eps;
  const float* inv_freq;                    // [half], half <= 256
  int half;
  float attention_factor;
  RopePairing pairing;
  const int64_t* positions;  // [rows]
  const int32_t* slots;      // [rows]
  float* key_pool;
  float* value_pool;
};
void attention_inputs(const AttentionInputsArgs& args, cudaStream_t stream);

// ---- clamp.cu --------------------------------------------------------------------------------------
// x [n] bf16 clamped to [-clip, clip] in place.
void clamp(bf16* x, int64_t n, float clip, cudaStream_t stream);

// ---- activation.cu ---------------------------------------------------------------------------------
// out [n] = silu(gate) * up, all bf16 (the product in fp32).
void silu_mul(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t stream);
// y [rows, cols] bf16 += bias [cols] fp32 (in fp32, rounded once).
void add_bias(bf16* y, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream);

// ---- attention.cu ----------------------------------------------------------------------------------
// The paged KV cache: a layer's keys and values are pools [num_blocks · block_tokens, row] fp32; row i of
// a batch sits at pool row slot[i] (its sequence's block for its position · block_tokens + the offset).
// rows [n, width] bf16 (row stride row_stride) -> pool rows slot[i], columns [0, width) (pool row = width);
// a row of slot -1 is not written.
void append_kv(const bf16* rows, int64_t n, int64_t width, int64_t row_stride, const int32_t* slot,
               float* pool, cudaStream_t stream);

struct PagedAttentionArgs {
  const bf16* q;                // [rows, heads, dk], row stride q_row
  const float* keys;            // the layer's key pool [num_blocks · block_tokens, kv_heads · dk]
  const float* values;          // the layer's value pool [num_blocks · block_tokens, kv_heads · dv]
  const int32_t* block_tables;  // the batch's sequences' block tables, one after another
  const int32_t* row_table;     // [rows] where row i's sequence's table starts in block_tables
  const int32_t* row_visible;   // [rows] keys row i sees: positions [0, row_visible[i]) (causal)
  int64_t rows, heads, kv_heads, dk, dv, block_tokens;
  float scale;  // multiplies q·k
  bf16* out;    // [rows, heads, dv]
  // The most rows one sequence has in the batch (0: not known). Above kPrefillAttentionRows the tiled
  // prefill kernel runs (when the head sizes fit it); a decode step keeps the kernel of one block a row.
  int64_t max_sequence_rows = 0;
  int64_t q_row = 0;  // elements between q's rows; 0: heads · dk
};
constexpr int64_t kPrefillAttentionRows = 16;
// Softmax(scale · q·k) v per (row, query head) with an fp32 online softmax; query head h reads KV head
// h / (heads / kv_heads). Limits: dk <= 1024, dv <= 512.
void paged_attention(const PagedAttentionArgs& args, cudaStream_t stream);
// The tiled path paged_attention takes for prefill (prefill_attention.cu): a block takes 16 query positions
// of the query heads of one KV head (more positions for small groups), key and value tiles staged once for
// them in shared memory as bf16, both products on the tensor cores with the scores in registers. Fits when
// dk = dv is 16, 32, 64 or 128, the pools are 16-byte aligned and q and out 4-byte aligned.
bool prefill_attention_fits(const PagedAttentionArgs& args);
void prefill_attention(const PagedAttentionArgs& args, cudaStream_t stream);

// ---- mla.cu ----------------------------------------------------------------------------------------
struct MlaDims {
  int64_t heads, nope, rope, v, rank;
};
// q [T, heads, nope + rope] -> out [T, heads, rank + rope]: [W_ukᵀ q_nope | q_rot], W_uk[h] the rows
// [h (nope + v), h (nope + v) + nope) of kv_b [heads (nope + v), rank] bf16.
void mla_absorb_queries(const bf16* q, const bf16* kv_b, const MlaDims& dims, int64_t T, bf16* out,
                        cudaStream_t stream);
// context [T, heads, rank] -> out [T, heads, v]: W_uv[h] · context, W_uv[h] the rows
// [h (nope + v) + nope, (h + 1)(nope + v)) of kv_b.
void mla_expand_context(const bf16* context, const bf16* kv_b, const MlaDims& dims, int64_t T, bf16* out,
                        cudaStream_t stream);

// ---- sampling.cu -----------------------------------------------------------------------------------
// model::TokenChoice of one row (temperature 0: greedy).
struct TokenChoiceArgs {
  float temperature, top_p;
  int top_k;
  double uniform;
};
// out [rows] = the token choices[r] (device) picks from row r of logits [rows, vocab] fp32.
void choose_tokens(const float* logits, int64_t rows, int64_t vocab, const TokenChoiceArgs* choices,
                   int32_t* out, cudaStream_t stream);

// ---- random_fill.cu --------------------------------------------------------------------------------
// x [n] = uniform values of standard deviation `stddev` (mean 0), each a function of (seed, index) only.
void fill_uniform(bf16* x, int64_t n, float stddev, uint64_t seed, cudaStream_t stream);
void fill_uniform(float* x, int64_t n, float stddev, uint64_t seed, cudaStream_t stream);

}  // namespace moe::cuda
