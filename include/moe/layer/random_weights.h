#pragma once
// Random weights for a MoE block of a given config: for demos and benchmarks where no checkpoint is at hand.
// Deterministic for a seed, whatever the thread count.

#include <cstdint>

#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"

namespace moe {

// Uniform values with the standard deviation of a 1/sqrt(fan_in) initialisation, stored in `dtype`; the
// router gets `router_scale` times that, and DeepSeek-V3's correction bias N(0, 0.02)-like values.
MoeWeights random_moe_weights(const MoeConfig& config, uint64_t seed, DType dtype = DType::BF16,
                              float router_scale = 1.0f);

// A [rows, cols] tensor of uniform values of standard deviation `stddev`, in `dtype`.
Tensor random_tensor(std::vector<int64_t> shape, float stddev, uint64_t seed, DType dtype = DType::F32);

}  // namespace moe
