// Qwen2-MoE (transformers 5.17 configuration_qwen2_moe.py, modeling_qwen2_moe.py): GQA with q/k/v biases,
// sliding-window attention only under use_sliding_window. MoE keys: layer/moe_config.cpp's qwen2_moe rules
// (a sigmoid-gated shared expert; MoE layers every decoder_sparse_step, except mlp_only_layers).
#include <nlohmann/json.hpp>

#include "families.h"
#include "core/json_config.h"

namespace moe::model {

namespace {

void parse_attention(const nlohmann::json& c, ModelConfig& m) {
  m.qkv_bias = json_config::get_bool(c, "qkv_bias", true);
  if (json_config::get_bool(c, "use_sliding_window", false))
    m.sliding_window = json_config::get_size(c, "sliding_window", 4096);
}

}  // namespace

const Family kQwen2Moe = {
    .model_type = "qwen2_moe",
    .defaults = {.vocab = 151936, .intermediate = 5632, .layers = 24, .heads = 16, .kv_heads = 16,
                 .max_positions = 32768, .eps = 1e-6, .theta = 1e4, .bos = -1, .eos = -1},
    .attention = AttentionKind::gqa,
    .parse_attention = parse_attention,
    .moe_block_prefix = moe_block_in_mlp,
};

}  // namespace moe::model
