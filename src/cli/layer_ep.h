#pragma once
// moe layer --ep: the block under expert parallelism over MPI (every rank runs this; rank 0 writes).

#include <string>

#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"

namespace moe::cli {

struct EpLayerArgs {
  std::string placement;  // placement JSON, or empty for contiguous
  std::string transfer;   // f32 | bf16 | fp8 (dispatch wire format)
  std::string output;     // safetensors: hidden_states, topk_ids, topk_weights
  std::string stats;      // optional: load statistics + per-rank exchange statistics
};

void run_layer_ep(const MoeConfig& config, MoeWeights weights, const Tensor& x, const EpLayerArgs& args);

}  // namespace moe::cli
