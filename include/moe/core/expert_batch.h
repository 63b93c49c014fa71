#pragma once
// The data that flows between the stages of a MoE layer (router -> prepare -> experts -> finalize).
// Plain bundles of tensors, shared by every backend; the stages themselves live in layer/ and the
// backends' ops in cpu/ and cuda/.

#include <cstdint>

#include "moe/core/tensor.h"

namespace moe {

// What the padded paradigm does with a pair beyond its expert's capacity: `drop` — its contribution is
// zero; `renormalize` — the token's kept weights are rescaled to the token's original weight sum.
enum class OverflowPolicy : uint8_t { drop, renormalize };

// The router's choices for a batch of tokens.
struct TopK {
  Tensor ids;      // [n_tokens, top_k] I32, best first
  Tensor weights;  // [n_tokens, top_k] F32
};

// Weights of one SwiGLU MLP: y = down · (silu(gate · x) ⊙ (up · x)). Any float dtype.
struct SwigluWeights {
  Tensor gate;  // [I, H] (HF gate_proj, Mixtral w1)
  Tensor up;    // [I, H] (HF up_proj, Mixtral w3)
  Tensor down;  // [H, I] (HF down_proj, Mixtral w2)
};

// Token rows grouped by expert. Expert e owns rows [expert_offsets[e], expert_offsets[e] + expert_counts[e]).
// Contiguous layout: segments packed back to back (n_rows = kept pairs). Padded layout: every expert owns
// `capacity` rows starting at e * capacity (n_rows = n_experts * capacity), of which expert_counts[e] are
// filled; the rest are zero.
struct ExpertBatch {
  Tensor rows;                // [n_rows, H] F32
  Tensor row_token;           // [n_rows] I32: the token a row came from (-1 for padding)
  Tensor expert_offsets;      // [n_experts] I64
  Tensor expert_counts;       // [n_experts] I64
  Tensor pair_rows;           // [n_tokens, top_k] I32: row of pair (t, j), -1 where the pair was dropped
  Tensor pair_weights;        // [n_tokens, top_k] F32: combine weight of pair (t, j) after the overflow policy
  Tensor dropped_per_expert;  // [n_experts] I64
  int64_t capacity = -1;      // rows per expert in the padded layout; -1 in the contiguous one
};

}  // namespace moe
