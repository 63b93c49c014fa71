// One rotary pair of a head, shared by the RoPE kernel and the fused attention-inputs kernel so that both
// give the same values: the columns pair i reads and writes under each pairing, and its rotation (the angle
// in fp32, inv_freq · position, cos and sin scaled by the attention factor, as transformers 5.17).
#pragma once

#include <cstdint>

#include "cuda/decoder_kernels.h"

namespace moe::cuda {

struct RopePair {
  int in0, in1, out0, out1;  // columns of the head
};

// halves: (i, i + half) both ways; pairs: (2i, 2i + 1) both ways; pairs_to_halves: reads pairs, writes halves.
__device__ __forceinline__ RopePair rope_pair(RopePairing pairing, int i, int half) {
  const bool interleaved_in = pairing != RopePairing::halves, interleaved_out = pairing == RopePairing::pairs;
  return {interleaved_in ? 2 * i : i, interleaved_in ? 2 * i + 1 : i + half, interleaved_out ? 2 * i : i,
          interleaved_out ? 2 * i + 1 : i + half};
}

// (x0, x1) rotated by inv_freq · position.
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, float inv_freq, int64_t position,
                                              float attention_factor) {
  float s, c;
  sincosf(inv_freq * static_cast<float>(position), &s, &c);
  c *= attention_factor;
  s *= attention_factor;
  return make_float2(x0 * c - x1 * s, x1 * c + x0 * s);
}

}  // namespace moe::cuda
