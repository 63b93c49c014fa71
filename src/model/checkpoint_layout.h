#pragma once
// The tensors a checkpoint of a config holds, by HF name with their shapes: exactly what the decoder's
// loader (causal_lm.cpp, gqa_attention.cpp, mla_attention.cpp, layer/moe_weights.cpp) reads, with the MoE
// block under `mlp.`, which every family's loader accepts. For a checkpoint made without files (random
// weights of a model shape: Checkpoint::generated) and for the bytes a bench must read.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moe/model/model_config.h"

namespace moe::model {

enum class ExpertTensors : uint8_t {
  per_expert,  // experts.{e}.gate_proj/up_proj/down_proj (Mixtral: w1/w3/w2), as published checkpoints
  fused,  // experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I], as transformers 5 holds them
};

// name -> shape of every tensor; unquantised (fp8 / int4 scales are not listed).
std::map<std::string, std::vector<int64_t>> checkpoint_layout(const ModelConfig& config,
                                                              ExpertTensors experts);

}  // namespace moe::model
