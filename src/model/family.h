#pragma once
// A model family: what one HuggingFace model_type adds to the generic decoder. Each family is one file
// under families/ (its config keys and defaults, its attention's options, its tensor names); the decoder
// and the config reader ask the registry and know no family by name. The MoE keys of every family are
// layer/'s data (moe_config.h), which the MoE layer reads without model/; which decoder layers hold a MoE
// block follows from them (is_moe_layer).

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <span>
#include <string>

#include "moe/core/checkpoint.h"
#include "moe/model/model_config.h"

namespace moe::model {

// The defaults of transformers' config class for the keys every checkpoint sets anyway.
struct FamilyDefaults {
  int64_t vocab, intermediate, layers, heads, kv_heads, max_positions;  // kv_heads 0: = heads
  double eps, theta;
  int64_t bos, eos;  // -1: none
};

struct Family {
  const char* model_type;
  FamilyDefaults defaults;
  AttentionKind attention;
  // The family's own attention keys, after the generic GQA or MLA sizes are read: GQA's qkv biases, q/k
  // norms, clip_qkv and sliding window; MLA's RoPE pairing.
  void (*parse_attention)(const nlohmann::json& config, ModelConfig& m);
  // The tensor-name prefix of a decoder layer's MoE block, given the layer's ("model.layers.3.").
  std::string (*moe_block_prefix)(const Checkpoint& checkpoint, const std::string& layer_prefix);
};

// The MoE block under `mlp.`, as most families name it.
std::string moe_block_in_mlp(const Checkpoint& checkpoint, const std::string& layer_prefix);

// Every family, in the order of supported_model_types().
std::span<const Family* const> families();

// The family of `model_type`; an unknown one is a moe::Error naming it and the supported ones.
const Family& find_family(const std::string& model_type);

}  // namespace moe::model
