#include "checkpoint_layout.h"

#include <fmt/core.h>

namespace moe::model {

namespace {

using Layout = std::map<std::string, std::vector<int64_t>>;

void add_mlp(Layout& t, const std::string& p, const char* gate, const char* up, const char* down, int64_t H,
             int64_t I) {
  t[p + gate + ".weight"] = {I, H};
  t[p + up + ".weight"] = {I, H};
  t[p + down + ".weight"] = {H, I};
}

void add_gqa(Layout& t, const ModelConfig& c, const std::string& p) {
  const int64_t H = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  t[p + "q_proj.weight"] = {q, H};
  t[p + "k_proj.weight"] = {kv, H};
  t[p + "v_proj.weight"] = {kv, H};
  t[p + "o_proj.weight"] = {H, q};
  if (c.qkv_bias) {
    t[p + "q_proj.bias"] = {q};
    t[p + "k_proj.bias"] = {kv};
    t[p + "v_proj.bias"] = {kv};
  }
  if (c.attention_bias) t[p + "o_proj.bias"] = {H};
  if (c.qk_norm == QkNorm::per_head) {
    t[p + "q_norm.weight"] = {c.head_dim};
    t[p + "k_norm.weight"] = {c.head_dim};
  } else if (c.qk_norm == QkNorm::whole) {
    t[p + "q_norm.weight"] = {q};
    t[p + "k_norm.weight"] = {(H / c.num_heads) * c.num_kv_heads};
  }
}

void add_mla(Layout& t, const ModelConfig& c, const std::string& p) {
  const int64_t H = c.hidden_size, nh = c.num_heads, kv_a = c.kv_lora_rank + c.qk_rope_head_dim;
  if (c.q_lora_rank > 0) {
    t[p + "q_a_proj.weight"] = {c.q_lora_rank, H};
    if (c.attention_bias) t[p + "q_a_proj.bias"] = {c.q_lora_rank};
    t[p + "q_a_layernorm.weight"] = {c.q_lora_rank};
    t[p + "q_b_proj.weight"] = {nh * c.qk_head_dim(), c.q_lora_rank};
  } else {
    t[p + "q_proj.weight"] = {nh * c.qk_head_dim(), H};
  }
  t[p + "kv_a_proj_with_mqa.weight"] = {kv_a, H};
  if (c.attention_bias) t[p + "kv_a_proj_with_mqa.bias"] = {kv_a};
  t[p + "kv_a_layernorm.weight"] = {c.kv_lora_rank};
  t[p + "kv_b_proj.weight"] = {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank};
  t[p + "o_proj.weight"] = {H, nh * c.v_head_dim};
  if (c.attention_bias) t[p + "o_proj.bias"] = {H};
}

void add_moe(Layout& t, const MoeConfig& m, const std::string& p, ExpertTensors experts) {
  const int64_t H = m.hidden_size, I = m.expert_intermediate_size, E = m.router.n_experts;
  t[p + "gate.weight"] = {E, H};
  if (m.router_has_correction_bias) t[p + "gate.e_score_correction_bias"] = {E};
  if (experts == ExpertTensors::fused) {
    t[p + "experts.gate_up_proj"] = {E, 2 * I, H};
    t[p + "experts.down_proj"] = {E, H, I};
  } else {
    const bool mixtral = m.naming == ExpertNaming::w1_w3_w2;
    for (int64_t e = 0; e < E; ++e)
      add_mlp(t, fmt::format("{}experts.{}.", p, e), mixtral ? "w1" : "gate_proj", mixtral ? "w3" : "up_proj",
              mixtral ? "w2" : "down_proj", H, I);
  }
  const int64_t S = m.shared_intermediate_size;
  if (m.shared == SharedExpertKind::plain) {
    add_mlp(t, p + "shared_experts.", "gate_proj", "up_proj", "down_proj", H, S);
  } else if (m.shared == SharedExpertKind::sigmoid_gated) {
    add_mlp(t, p + "shared_expert.", "gate_proj", "up_proj", "down_proj", H, S);
    t[p + "shared_expert_gate.weight"] = {1, H};
  }
}

}  // namespace

Layout checkpoint_layout(const ModelConfig& c, ExpertTensors experts) {
  const int64_t H = c.hidden_size;
  Layout t;
  t["model.embed_tokens.weight"] = {c.vocab_size, H};
  t["model.norm.weight"] = {H};
  if (!c.tie_word_embeddings) t["lm_head.weight"] = {c.vocab_size, H};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    t[p + "input_layernorm.weight"] = {H};
    t[p + "post_attention_layernorm.weight"] = {H};
    if (c.attention == AttentionKind::mla)
      add_mla(t, c, p + "self_attn.");
    else
      add_gqa(t, c, p + "self_attn.");
    if (is_moe_layer(c.moe, i))
      add_moe(t, c.moe, p + "mlp.", experts);
    else
      add_mlp(t, p + "mlp.", "gate_proj", "up_proj", "down_proj", H, c.intermediate_size);
  }
  return t;
}

}  // namespace moe::model
