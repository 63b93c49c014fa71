#pragma once
// Shared experts at reference precision: y += shared(x), or += sigmoid(x · shared_gateᵀ) · shared(x) for
// Qwen2-MoE. Used by every layer that runs the reference experts (single rank and expert parallel).

#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"

namespace moe {

// x [T, H] F32, y [T, H] F32 (updated in place). Does nothing when the config has no shared experts.
void add_shared_experts_reference(const MoeConfig& config, const MoeWeights& weights, const Tensor& x, Tensor& y);

}  // namespace moe
