// OLMoE (transformers 5.17 configuration_olmoe.py, modeling_olmoe.py): GQA with RMSNorms over the whole q
// and k projections (before the split into heads), q/k/v clamped to clip_qkv, biases only under
// attention_bias, sliding-window attention when the config sets a window. MoE keys: layer/moe_config.cpp's
// olmoe rules (experts sized by intermediate_size; every layer a MoE block).
#include <nlohmann/json.hpp>

#include "families.h"
#include "core/json_config.h"

namespace moe::model {

namespace {

void parse_attention(const nlohmann::json& c, ModelConfig& m) {
  m.qkv_bias = m.attention_bias = json_config::get_bool(c, "attention_bias", false);
  m.qk_norm = QkNorm::whole;
  m.clip_qkv = json_config::get_double(c, "clip_qkv", 0);
  m.sliding_window = json_config::get_size(c, "sliding_window", 0);
}

}  // namespace

const Family kOlmoe = {
    .model_type = "olmoe",
    .defaults = {.vocab = 50304, .intermediate = 2048, .layers = 16, .heads = 16, .kv_heads = 0,
                 .max_positions = 4096, .eps = 1e-5, .theta = 1e4, .bos = -1, .eos = 50279},
    .attention = AttentionKind::gqa,
    .parse_attention = parse_attention,
    .moe_block_prefix = moe_block_in_mlp,
};

}  // namespace moe::model
