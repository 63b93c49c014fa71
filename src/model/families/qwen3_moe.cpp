// Qwen3-MoE (transformers 5.17 configuration_qwen3_moe.py, modeling_qwen3_moe.py): GQA with RMSNorms over
// each head of q and k (before RoPE), biases only under attention_bias, sliding-window attention only under
// use_sliding_window. MoE keys: layer/moe_config.cpp's qwen3_moe rules (num_experts or num_local_experts;
// MoE layers every decoder_sparse_step, except mlp_only_layers).
#include <nlohmann/json.hpp>

#include "families.h"
#include "core/json_config.h"

namespace moe::model {

namespace {

void parse_attention(const nlohmann::json& c, ModelConfig& m) {
  m.qkv_bias = m.attention_bias = json_config::get_bool(c, "attention_bias", false);
  m.qk_norm = QkNorm::per_head;
  if (json_config::get_bool(c, "use_sliding_window", false))
    m.sliding_window = json_config::get_size(c, "sliding_window", 4096);
}

}  // namespace

const Family kQwen3Moe = {
    .model_type = "qwen3_moe",
    .defaults = {.vocab = 151936, .intermediate = 6144, .layers = 24, .heads = 32, .kv_heads = 4,
                 .max_positions = 32768, .eps = 1e-6, .theta = 1e4, .bos = -1, .eos = -1},
    .attention = AttentionKind::gqa,
    .parse_attention = parse_attention,
    .moe_block_prefix = moe_block_in_mlp,
};

}  // namespace moe::model
