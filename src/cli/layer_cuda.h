#pragma once
// Running one MoE layer on the GPU for the CLI: host tensors in, host LayerOutput back (the same shape as
// the CPU layer's, so `moe layer` and `moe demo` treat both backends alike).

#include "moe/layer/moe_layer.h"

namespace moe::cli {

// True when this build has the CUDA backend and a GPU is visible.
bool cuda_available();

// x [T, H] F32/BF16/F16 (rounded to bf16 on the way in). Throws moe::Error without a GPU or CUDA build.
// timings.experts_ms holds the whole device forward (CUDA events); the other stages are inside it.
LayerOutput run_layer_cuda(const MoeConfig& config, const MoeWeights& weights, const Tensor& x,
                           const LayerOptions& options);

}  // namespace moe::cli
