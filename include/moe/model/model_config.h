#pragma once
// The whole decoder of a HuggingFace config.json (the MoE part is moe::MoeConfig): attention kind and
// sizes, norms, rotary embedding, lm_head tying, special token ids. Keys, aliases and defaults follow
// transformers 5.17 (configuration_<family>.py, modeling_rope_utils.py); both the new key forms
// (`rope_parameters`, qwen3_moe's `num_local_experts`) and the old ones (`rope_theta` + `rope_scaling`,
// `num_experts`) are accepted, as real checkpoints use both.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "moe/layer/moe_config.h"

namespace moe::model {

enum class AttentionKind : uint8_t {
  gqa,  // q/k/v/o projections, grouped KV heads (Mixtral, Qwen2/3-MoE, OLMoE)
  mla,  // multi-head latent attention (DeepSeek-V2/V3)
};

enum class QkNorm : uint8_t {
  none,
  per_head,  // Qwen3-MoE: RMSNorm over each head's head_dim, before RoPE
  whole,     // OLMoE: RMSNorm over the whole q (resp. k) projection, before the split into heads
};

enum class RopeType : uint8_t { standard, yarn };  // rope_type "default" and "yarn"

// How the rotary dimensions of a head are paired.
enum class RopeLayout : uint8_t {
  halves,           // rotate_half: dimension i pairs with i + d/2 (Llama-style; DeepSeek-V3 with rope_interleave false)
  pairs,            // DeepSeek-V2 (complex view): dimensions 2i and 2i+1 pair, output in the same places
  pairs_to_halves,  // DeepSeek-V3 rope_interleave: 2i and 2i+1 pair, output de-interleaved (evens, then odds)
};

struct RopeConfig {
  RopeType type = RopeType::standard;
  RopeLayout layout = RopeLayout::halves;
  double theta = 10000.0;
  int64_t dim = 0;  // rotary dimensions per head (head_dim, or qk_rope_head_dim for MLA)
  // YaRN (rope_parameters): the interpolation factor, the ramp bounds and the cos/sin scale.
  double factor = 1.0;
  double beta_fast = 32.0, beta_slow = 1.0;
  int64_t original_max_position_embeddings = 0;
  bool truncate = true;
  double attention_factor = 1.0;  // multiplies cos and sin
};

struct ModelConfig {
  std::string model_type;
  MoeConfig moe;  // the MoE blocks (routing, experts, shared experts, which layers)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;  // the dense MLP of the non-MoE layers
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;

  AttentionKind attention = AttentionKind::gqa;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;          // GQA: per-head size of q, k and v
  bool qkv_bias = false;         // GQA: biases on q/k/v (Qwen2-MoE)
  bool attention_bias = false;   // o_proj bias (GQA), q_a/kv_a/o biases (MLA)
  QkNorm qk_norm = QkNorm::none;
  double clip_qkv = 0;           // OLMoE: clamp q, k, v to [-clip, clip] after the projections; 0 = off
  int64_t sliding_window = 0;    // 0 = full attention; else only allowed where it cannot bite (see new_cache)

  // MLA (DeepSeek): q via q_proj (q_lora_rank 0) or q_a_proj -> q_a_layernorm -> q_b_proj.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  RopeConfig rope;
  double softmax_scale = 1.0;  // multiplies q·k: head_dim^-0.5 (MLA: qk_head_dim^-0.5, times mscale^2 under YaRN)

  std::vector<int32_t> eos_token_ids;  // generation_config.json's eos_token_id, else config.json's
  int32_t bos_token_id = -1;           // -1 when none

  // MLA: the per-head query/key width.
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// Parses config.json's object (and generation_config.json's, may be null). Throws moe::Error naming the
// key for a bad value, the unsupported model_type (listing the supported ones), or the unsupported feature
// (rope_type, partial_rotary_factor, mlp_bias, ...).
ModelConfig parse_model_config(const nlohmann::json& config, const nlohmann::json& generation_config);

// Reads DIR/config.json (required) and DIR/generation_config.json (optional).
ModelConfig load_model_config(const std::filesystem::path& dir);

}  // namespace moe::model
