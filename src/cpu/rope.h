#pragma once
// Rotary position embeddings on the CPU: rotates the rotary part of each head by its token's position,
// with the angles in fp32 (inv_freq · position) and cos/sin scaled by the attention factor, as transformers
// 5.17 applies them. The frequency table is the model's (model/rope.h builds it from the config).

#include <cstdint>
#include <span>

#include "moe/core/tensor.h"

namespace moe::cpu {

// How the rotary dimensions of a head are paired.
enum class RopePairing : uint8_t {
  halves,           // rotate_half: dimension i pairs with i + d/2
  pairs,            // complex view: dimensions 2i and 2i+1 pair, output in the same places
  pairs_to_halves,  // 2i and 2i+1 pair, output de-interleaved (evens, then odds)
};

struct RopeTable {
  std::span<const float> inv_freq;  // [dim / 2]; dim at most 512
  float attention_factor = 1.0f;    // multiplies cos and sin
  RopePairing pairing = RopePairing::halves;
};

// Rotates x[0, dim) of one head in place for position `pos`.
void rope_head(const RopeTable& table, float* x, int64_t pos);

// Every head of x [T, heads · stride] (F32 contiguous, in place): columns [offset, offset + dim) of head h of
// row t, for position positions[t].
void rope(const RopeTable& table, Tensor& x, int64_t heads, int64_t offset, std::span<const int64_t> positions);

}  // namespace moe::cpu
