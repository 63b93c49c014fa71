// DeepSeek-V2 (transformers 5.17 configuration_deepseek_v2.py, modeling_deepseek_v2.py): multi-head latent
// attention with RoPE on the complex view (dimensions 2i and 2i+1 pair, in place). MoE keys:
// layer/moe_config.cpp's deepseek_v2 rules (topk_method greedy or group-limited, fused shared experts, the
// first first_k_dense_replace layers dense).
#include <nlohmann/json.hpp>

#include "families.h"

namespace moe::model {

namespace {

void parse_attention(const nlohmann::json&, ModelConfig& m) { m.rope.layout = RopeLayout::pairs; }

}  // namespace

const Family kDeepseekV2 = {
    .model_type = "deepseek_v2",
    .defaults = {.vocab = 102400, .intermediate = 11008, .layers = 32, .heads = 32, .kv_heads = 0,
                 .max_positions = 2048, .eps = 1e-6, .theta = 1e4, .bos = 1, .eos = 2},
    .attention = AttentionKind::mla,
    .parse_attention = parse_attention,
    .moe_block_prefix = moe_block_in_mlp,
};

}  // namespace moe::model
