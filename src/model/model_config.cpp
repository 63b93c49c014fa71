#include "moe/model/model_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <climits>
#include <fstream>

#include "family.h"
#include "core/text_file.h"
#include "core/json_config.h"

namespace moe::model {

namespace {

using nlohmann::json;
using namespace json_config;

// eos_token_id: an int, a list of ints, or null.
std::vector<int32_t> token_ids(const json& c, const char* key, std::optional<int64_t> fallback) {
  const auto it = c.find(key);
  if (it == c.end()) return fallback && *fallback >= 0 ? std::vector<int32_t>{static_cast<int32_t>(*fallback)}
                                                       : std::vector<int32_t>{};
  if (it->is_null()) return {};
  std::vector<int32_t> ids;
  for (const json& v : it->is_array() ? *it : json::array({*it})) {
    MOE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
              "'{}' must be a token id or a list of them, got {}", key, it->dump());
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// rope_parameters (5.x) or rope_scaling + rope_theta (4.x), standardised as transformers'
// convert_rope_params_to_dict / standardize_rope_params do.
void parse_rope(const json& c, ModelConfig& m, double default_theta) {
  json params = json::object();
  if (const json* scaling = find(c, "rope_scaling"); scaling && !scaling->empty()) params = *scaling;
  else if (const json* p = find(c, "rope_parameters")) params = *p;
  MOE_CHECK(params.is_object(), "config.json 'rope_parameters' must be an object, got {}", params.dump());
  m.rope.theta = get_double(params, "rope_theta", get_double(c, "rope_theta", default_theta));
  const std::string type = get_string(params, "rope_type", get_string(params, "type", "default"));
  const double partial = get_double(params, "partial_rotary_factor", get_double(c, "partial_rotary_factor", 1.0));
  MOE_CHECK(partial == 1.0, "partial_rotary_factor {} is not supported (only full-width RoPE)", partial);
  if (type == "default") {
    m.rope.type = RopeType::standard;
  } else if (type == "yarn") {
    m.rope.type = RopeType::yarn;
    m.rope.original_max_position_embeddings =
        get_size(params, "original_max_position_embeddings", m.max_position_embeddings);
    m.rope.factor = get_double(params, "factor",
                               double(m.max_position_embeddings) / double(m.rope.original_max_position_embeddings));
    // `x or default` in transformers: 0 counts as unset.
    m.rope.beta_fast = get_double(params, "beta_fast", 0) != 0 ? get_double(params, "beta_fast", 0) : 32.0;
    m.rope.beta_slow = get_double(params, "beta_slow", 0) != 0 ? get_double(params, "beta_slow", 0) : 1.0;
    m.rope.truncate = get_bool(params, "truncate", true);
    const double mscale = get_double(params, "mscale", 0), mscale_all_dim = get_double(params, "mscale_all_dim", 0);
    if (find(params, "attention_factor")) m.rope.attention_factor = get_double(params, "attention_factor", 1.0);
    else if (mscale != 0 && mscale_all_dim != 0)
      m.rope.attention_factor = yarn_mscale(m.rope.factor, mscale) / yarn_mscale(m.rope.factor, mscale_all_dim);
    else m.rope.attention_factor = yarn_mscale(m.rope.factor, 1.0);
  } else {
    MOE_FAIL("rope_type '{}' is not supported: this engine implements 'default' and 'yarn'", type);
  }
  // MLA (transformers' yarn_apply_mscale): any non-default type with mscale_all_dim scales the softmax by
  // mscale(factor, mscale_all_dim)^2.
  if (m.attention == AttentionKind::mla && type != "default") {
    const double mscale_all_dim = get_double(params, "mscale_all_dim", 0);
    if (mscale_all_dim != 0) {
      const double s = yarn_mscale(get_double(params, "factor", m.rope.factor), mscale_all_dim);
      m.softmax_scale *= s * s;
    }
  }
}

void parse_gqa(const json& c, const Family& family, ModelConfig& m) {
  m.attention = AttentionKind::gqa;
  m.head_dim = get_size(c, "head_dim", m.hidden_size / m.num_heads);
  MOE_CHECK(m.head_dim > 0 && m.head_dim % 2 == 0, "head_dim must be a positive even number, got {}", m.head_dim);
  MOE_CHECK(m.num_kv_heads > 0 && m.num_heads % m.num_kv_heads == 0,
            "num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", m.num_heads, m.num_kv_heads);
  family.parse_attention(c, m);  // biases, q/k norms, clip_qkv, sliding window
  MOE_CHECK(m.clip_qkv >= 0, "clip_qkv must not be negative, got {}", m.clip_qkv);
  MOE_CHECK(m.sliding_window >= 0, "sliding_window must not be negative, got {}", m.sliding_window);
  m.softmax_scale = 1.0 / std::sqrt(double(m.head_dim));
  m.rope.dim = m.head_dim;
  m.rope.layout = RopeLayout::halves;
}

void parse_mla(const json& c, const Family& family, ModelConfig& m) {
  m.attention = AttentionKind::mla;
  m.q_lora_rank = get_size(c, "q_lora_rank", 1536);  // an explicit null reads as the default: handled below
  if (c.contains("q_lora_rank") && c["q_lora_rank"].is_null()) m.q_lora_rank = 0;
  m.kv_lora_rank = get_size(c, "kv_lora_rank", 512);
  m.qk_nope_head_dim = get_size(c, "qk_nope_head_dim", 128);
  m.qk_rope_head_dim = get_size(c, "qk_rope_head_dim", 64);
  m.v_head_dim = get_size(c, "v_head_dim", 128);
  m.attention_bias = get_bool(c, "attention_bias", false);
  MOE_CHECK(!get_bool(c, "mlp_bias", false), "mlp_bias true is not supported (DeepSeek MLPs here have no biases)");
  MOE_CHECK(m.q_lora_rank >= 0 && m.kv_lora_rank > 0 && m.qk_nope_head_dim >= 0 && m.qk_rope_head_dim > 0 &&
                m.qk_rope_head_dim % 2 == 0 && m.v_head_dim > 0,
            "MLA sizes must be positive (q_lora_rank {}, kv_lora_rank {}, qk_nope_head_dim {}, qk_rope_head_dim {} "
            "(even), v_head_dim {})",
            m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim);
  // NOTE: transformers expands the latent to one key/value per query head and then repeats them by
  // num_attention_heads / num_key_value_heads, which only works when the two are equal.
  MOE_CHECK(m.num_kv_heads == m.num_heads,
            "MLA with num_key_value_heads ({}) != num_attention_heads ({}) is not supported", m.num_kv_heads,
            m.num_heads);
  m.head_dim = m.qk_rope_head_dim;  // as transformers sets it: the rotary width
  m.softmax_scale = 1.0 / std::sqrt(double(m.qk_nope_head_dim + m.qk_rope_head_dim));
  m.rope.dim = m.qk_rope_head_dim;
  family.parse_attention(c, m);  // the RoPE pairing
}

}  // namespace

ModelConfig parse_model_config(const json& c, const json& generation) {
  MOE_CHECK(c.is_object(), "config.json must hold a JSON object");
  ModelConfig m;
  m.moe = parse_moe_config(c);  // validates model_type, hidden_act and the routing keys
  m.model_type = m.moe.model_type;
  const Family& family = find_family(m.model_type);
  const FamilyDefaults& d = family.defaults;
  m.vocab_size = get_size(c, "vocab_size", d.vocab);
  m.hidden_size = m.moe.hidden_size;
  m.num_layers = get_size(c, "num_hidden_layers", d.layers);
  m.moe.num_hidden_layers = m.num_layers;
  m.intermediate_size = get_size(c, "intermediate_size", d.intermediate);
  m.max_position_embeddings = get_size(c, "max_position_embeddings", d.max_positions);
  m.rms_norm_eps = get_double(c, "rms_norm_eps", d.eps);
  m.tie_word_embeddings = get_bool(c, "tie_word_embeddings", false);
  m.num_heads = get_size(c, "num_attention_heads", d.heads);
  m.num_kv_heads = get_size(c, "num_key_value_heads", d.kv_heads > 0 ? d.kv_heads : m.num_heads);
  MOE_CHECK(m.vocab_size > 0 && m.num_layers > 0 && m.num_heads > 0 && m.intermediate_size > 0,
            "vocab_size ({}), num_hidden_layers ({}), num_attention_heads ({}) and intermediate_size ({}) must be "
            "positive",
            m.vocab_size, m.num_layers, m.num_heads, m.intermediate_size);
  MOE_CHECK(m.rms_norm_eps > 0, "rms_norm_eps must be positive, got {}", m.rms_norm_eps);
  MOE_CHECK(get_int(c, "pretraining_tp", 1) == 1, "pretraining_tp other than 1 is not supported");

  if (family.attention == AttentionKind::mla) parse_mla(c, family, m);
  else parse_gqa(c, family, m);
  parse_rope(c, m, d.theta);

  const json& eos_source = generation.is_object() && generation.contains("eos_token_id") ? generation : c;
  m.eos_token_ids = token_ids(eos_source, "eos_token_id", d.eos);
  const std::vector<int32_t> bos = token_ids(c, "bos_token_id", d.bos);
  m.bos_token_id = bos.empty() ? -1 : bos.front();
  return m;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  MOE_CHECK(std::filesystem::is_directory(dir), "model directory '{}' does not exist", dir.string());
  MOE_CHECK(std::filesystem::exists(path), "'{}' has no config.json: is it a HuggingFace model directory?",
            dir.string());
  const json config = read_json_file(path, "config file");
  const std::filesystem::path gen_path = dir / "generation_config.json";
  const json generation = std::filesystem::exists(gen_path) ? read_json_file(gen_path, "generation config file") : json();
  try {
    return parse_model_config(config, generation);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path.string(), e.what()), e.where());
  }
}

}  // namespace moe::model
