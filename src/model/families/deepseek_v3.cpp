// DeepSeek-V3 (transformers 5.17 configuration_deepseek_v3.py, modeling_deepseek_v3.py): multi-head latent
// attention; RoPE pairs 2i with 2i+1 and de-interleaves its output under rope_interleave (the default), else
// rotates halves. MoE keys: layer/moe_config.cpp's deepseek_v3 rules (sigmoid routing with a correction
// bias over expert groups, fused shared experts, the first first_k_dense_replace layers dense).
#include <nlohmann/json.hpp>

#include "families.h"
#include "core/json_config.h"

namespace moe::model {

namespace {

void parse_attention(const nlohmann::json& c, ModelConfig& m) {
  m.rope.layout =
      json_config::get_bool(c, "rope_interleave", true) ? RopeLayout::pairs_to_halves : RopeLayout::halves;
}

}  // namespace

const Family kDeepseekV3 = {
    .model_type = "deepseek_v3",
    .defaults = {.vocab = 129280, .intermediate = 18432, .layers = 61, .heads = 128, .kv_heads = 128,
                 .max_positions = 4096, .eps = 1e-6, .theta = 1e4, .bos = 0, .eos = 1},
    .attention = AttentionKind::mla,
    .parse_attention = parse_attention,
    .moe_block_prefix = moe_block_in_mlp,
};

}  // namespace moe::model
