#include "layer_cuda.h"

#include <algorithm>

#include "moe/layer/cuda_stages.h"

namespace moe::cli {

bool cuda_available() { return cuda_device_available(); }

LayerOutput run_layer_cuda(const MoeConfig& config, const MoeWeights& weights, const Tensor& input,
                           const LayerOptions& options) {
  MOE_CHECK(cuda_available(), "--backend cuda: no GPU is visible (use --backend cpu)");
  const Tensor x = layer_input_f32(input, config.hidden_size);  // [T, H]: checked before the upload
  MoeLayer layer(config, make_cuda_stages(config, weights,
                                          {.max_tokens = std::max<int64_t>(x.size(0), 1),
                                           .paradigm = options.paradigm,
                                           .capacity_factor = options.capacity_factor,
                                           .overflow = options.overflow}));
  return layer.forward(x);  // the host path: x up as bf16, one forward, out and stats back
}

}  // namespace moe::cli
