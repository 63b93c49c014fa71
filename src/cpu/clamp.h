#pragma once
// Clamping on the CPU (OLMoE's clip_qkv on the q/k/v projections).

#include "moe/core/tensor.h"

namespace moe::cpu {

// Every value of x (F32 contiguous, in place) clamped to [-clip, clip].
void clamp(Tensor& x, float clip);

}  // namespace moe::cpu
