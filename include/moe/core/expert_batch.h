#pragma once
// The data that flows between the stages of a MoE layer (router -> prepare -> experts -> finalize).
// Plain bundles of tensors, shared by every backend and living on the stages' device (host or CUDA); the
// stages themselves live in layer/ and the backends' ops in cpu/ and cuda/.

#include <cstdint>

#include "moe/core/tensor.h"

namespace moe {

// What the padded paradigm does with a pair beyond its expert's capacity: `drop` — its contribution is
// zero; `renormalize` — the token's kept weights are rescaled to the token's original weight sum.
enum class OverflowPolicy : uint8_t { drop, renormalize };

// How the rows of a batch are laid out by expert: `contiguous` — each expert's rows packed back to back;
// `padded` — every expert owns a fixed capacity of rows, pairs beyond it handled by the OverflowPolicy.
enum class Paradigm : uint8_t { contiguous, padded };

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
// Host batches (the CPU ops) hold I64 offsets and counts and F32 rows; device batches (the CUDA permute)
// hold I32 offsets and counts, bf16 rows, and the grouped GEMMs' tile map. An index-only batch has rows
// [n_rows, 0] (or [0, 0] on the device): the experts gather row i from source[row_token[i]] themselves.
struct ExpertBatch {
  Tensor rows;                // [n_rows, H] F32 (host) or BF16 (device), or index-only
  Tensor row_token;           // [n_rows] I32: the token a row came from (-1 for padding)
  Tensor expert_offsets;      // [n_experts] I64 (host) / I32 (device)
  Tensor expert_counts;       // [n_experts] I64 (host) / I32 (device): rows filled in each segment
  Tensor pair_rows;           // [n_tokens, top_k] I32: row of pair (t, j), -1 where the pair was dropped
  Tensor pair_weights;        // [n_tokens, top_k] F32: combine weight of pair (t, j) after the overflow policy
  Tensor dropped_per_expert;  // [n_experts] I64 (host) / I32 (device)
  Tensor routed_counts;       // [n_experts] I64 (host) / I32 (device): pairs routed to each expert before the
                              // capacity limit (undefined where a prepare does not count them)
  int64_t capacity = -1;      // rows per expert in the padded layout; -1 in the contiguous one

  // Device batches only.
  Tensor source;         // [n_tokens, H] BF16: the token rows an index-only batch gathers from
  // The grouped GEMMs' tile map: tile i covers rows [tile_row[i], tile_row[i] + tile_rows) of expert
  // tile_expert[i], for i < n_tiles[0] (written on the device); tiles never straddle two experts.
  Tensor tile_expert;     // [max_tiles] I32
  Tensor tile_row;        // [max_tiles] I32
  Tensor n_tiles;         // [1] I32
  int tile_rows = 0;      // rows of a tile
  int tall_rows = 0;      // > 0: a segment's last tile also takes up to this many rows after it
  bool even_tiles = false;  // every segment has an even number of tiles (the wgmma kernel's tile pairs)
};

}  // namespace moe
