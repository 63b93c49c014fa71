#pragma once
// The weights of one MoE block, as zero-copy views into a checkpoint. Accepts the HF tensor names of every
// supported family, relative to a prefix (e.g. "model.layers.7.mlp."):
//   gate.weight [E, H], gate.e_score_correction_bias [E] (DeepSeek-V3),
//   experts.{e}.gate_proj|up_proj|down_proj.weight  (Mixtral: experts.{e}.w1|w3|w2.weight),
//   or fused experts.gate_up_proj [E, 2I, H] (gate rows first) + experts.down_proj [E, H, I] (transformers 5),
//   shared_experts.* (DeepSeek), shared_expert.* + shared_expert_gate.weight [1, H] (Qwen2-MoE).

#include <string>
#include <vector>

#include "moe/core/checkpoint.h"
#include "moe/core/expert_batch.h"
#include "moe/layer/moe_config.h"

namespace moe {

struct MoeWeights {
  Tensor router;                       // [E, H]
  Tensor correction_bias;              // [E] F32, or undefined
  std::vector<SwigluWeights> experts;  // [E]
  SwigluWeights shared;                // defined when config.shared != none
  Tensor shared_gate;                  // [1, H] for SharedExpertKind::sigmoid_gated
};

// Loads and checks names, shapes and dtypes (F32, BF16, F16; fp8 and int4 weights as config.quant says,
// dequantised to BF16 at load, with their scales checked). Errors give the full tensor name, the shape
// found and the shape the config implies.
MoeWeights load_moe_weights(const Checkpoint& checkpoint, const std::string& prefix, const MoeConfig& config);

}  // namespace moe
