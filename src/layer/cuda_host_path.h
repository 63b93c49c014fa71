#pragma once
// The host path of the CUDA stages (LayerStages::host_forward): host tensors in and out of a device layer.

#include <cstdint>
#include <functional>

#include "moe/layer/moe_layer.h"

namespace moe {

// x [T, H] host (F32, BF16 or F16, checked by layer_input_f32) goes up as bf16 in chunks of at most
// max_tokens tokens through pinned staging on a stream of the path's own, with async copies; out, topk and
// the load statistics (dropped pairs summed over the chunks) come back as host tensors, and
// timings.experts_ms holds the device time of the forwards (CUDA events). Synchronises.
std::function<LayerOutput(MoeLayer&, const Tensor&)> make_cuda_host_path(const MoeConfig& config, int64_t max_tokens);

}  // namespace moe
