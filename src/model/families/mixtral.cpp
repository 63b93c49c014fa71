// Mixtral (transformers 5.17 configuration_mixtral.py, modeling_mixtral.py): GQA without biases or q/k
// norms, sliding-window attention when the config sets a window, every layer a MoE block named
// block_sparse_moe in the published checkpoints. MoE keys: layer/moe_config.cpp's mixtral rules (experts
// w1/w3/w2, top-k always renormalised).
#include <nlohmann/json.hpp>

#include "families.h"
#include "core/json_config.h"

namespace moe::model {

namespace {

void parse_attention(const nlohmann::json& c, ModelConfig& m) {
  m.sliding_window = json_config::get_size(c, "sliding_window", 0);
}

// NOTE: Mixtral checkpoints name the block block_sparse_moe; transformers 5 in memory (and some re-saved
// checkpoints) call it mlp.
std::string moe_block_prefix(const Checkpoint& checkpoint, const std::string& layer_prefix) {
  // (An int4-quantised gate is stored as gate.qweight.)
  const bool block_sparse = checkpoint.contains(layer_prefix + "block_sparse_moe.gate.weight") ||
                            checkpoint.contains(layer_prefix + "block_sparse_moe.gate.qweight");
  return layer_prefix + (block_sparse ? "block_sparse_moe." : "mlp.");
}

}  // namespace

const Family kMixtral = {
    .model_type = "mixtral",
    .defaults = {.vocab = 32000, .intermediate = 14336, .layers = 32, .heads = 32, .kv_heads = 8,
                 .max_positions = 4096 * 32, .eps = 1e-5, .theta = 1e6, .bos = 1, .eos = 2},
    .attention = AttentionKind::gqa,
    .parse_attention = parse_attention,
    .moe_block_prefix = moe_block_prefix,
};

}  // namespace moe::model
