#include "moe/layer/moe_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>

#include <fmt/ranges.h>

#include "moe/core/check.h"
#include "moe/core/tensor.h"

namespace moe {

namespace {

using nlohmann::json;
using routing::RoutingMethod;

// Typed reads of config.json keys: a missing key (or an explicit null) gives the default; a key of the
// wrong type is an error naming it.
std::optional<const json*> find_key(const json& c, const char* key) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) return std::nullopt;
  return &*it;
}

int64_t int_key(const json& c, const char* key, std::optional<int64_t> fallback) {
  const auto value = find_key(c, key);
  if (!value) {
    MOE_CHECK(fallback.has_value(), "config.json lacks '{}', which this model_type needs", key);
    return *fallback;
  }
  const json& v = **value;
  // NOTE: a float such as 8.0 is accepted (some exporters write them), within +-2^53 where doubles are exact;
  // casting a larger one (1e300) to an integer would be undefined behaviour.
  const bool integral_float = v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                              std::fabs(v.get<double>()) <= 9007199254740992.0;
  MOE_CHECK(v.is_number_integer() || integral_float, "config.json key '{}' must be an integer, got {}", key, v.dump());
  MOE_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
            "config.json key '{}' = {} is out of range", key, v.dump());
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}

// The first of several spellings that is present (transformers' attribute_map aliases).
int64_t int_key_any(const json& c, std::initializer_list<const char*> keys, std::optional<int64_t> fallback) {
  for (const char* key : keys)
    if (find_key(c, key)) return int_key(c, key, std::nullopt);
  return int_key(c, *keys.begin(), fallback);
}

// A size of the model (hidden_size, an intermediate size): sizes from a file are bounded before anything is
// allocated or multiplied with them. 2^24 is far above any model today (DeepSeek-V3: hidden 7168), and a
// product of two bounded sizes cannot overflow int64.
constexpr int64_t kMaxModelSize = int64_t{1} << 24;

int64_t size_key(const json& c, std::initializer_list<const char*> keys, std::optional<int64_t> fallback) {
  const int64_t v = int_key_any(c, keys, fallback);
  MOE_CHECK(v <= kMaxModelSize, "config.json key '{}' = {} is out of range (at most {})", *keys.begin(), v,
            kMaxModelSize);
  return v;
}

double float_key(const json& c, const char* key, double fallback) {
  const auto value = find_key(c, key);
  if (!value) return fallback;
  MOE_CHECK((*value)->is_number(), "config.json key '{}' must be a number, got {}", key, (*value)->dump());
  return (*value)->get<double>();
}

// A float32 setting: a double beyond float's range (converting it would be undefined behaviour) is an error.
float float32_key(const json& c, const char* key, double fallback) {
  const double v = float_key(c, key, fallback);
  MOE_CHECK(std::fabs(v) <= std::numeric_limits<float>::max(), "config.json key '{}' = {} is out of float range",
            key, v);
  return static_cast<float>(v);
}

bool bool_key(const json& c, const char* key, bool fallback) {
  const auto value = find_key(c, key);
  if (!value) return fallback;
  MOE_CHECK((*value)->is_boolean(), "config.json key '{}' must be true or false, got {}", key, (*value)->dump());
  return (*value)->get<bool>();
}

std::string string_key(const json& c, const char* key, const std::string& fallback) {
  const auto value = find_key(c, key);
  if (!value) return fallback;
  MOE_CHECK((*value)->is_string(), "config.json key '{}' must be a string, got {}", key, (*value)->dump());
  return (*value)->get<std::string>();
}

int to_int(int64_t v, const char* key) {
  MOE_CHECK(v >= 0 && v <= (1 << 24), "config.json key '{}' = {} is out of range", key, v);
  return static_cast<int>(v);
}

void parse_mixtral(const json& c, MoeConfig& m) {
  m.hidden_size = size_key(c, {"hidden_size"}, 4096);
  m.expert_intermediate_size = size_key(c, {"intermediate_size"}, 14336);
  m.router.n_experts = to_int(int_key_any(c, {"num_local_experts", "num_experts"}, 8), "num_local_experts");
  m.router.top_k = to_int(int_key(c, "num_experts_per_tok", 2), "num_experts_per_tok");
  m.router.norm_topk_prob = true;  // Mixtral always renormalises; it has no norm_topk_prob key
  m.naming = ExpertNaming::w1_w3_w2;
}

void parse_qwen2_moe(const json& c, MoeConfig& m) {
  m.hidden_size = size_key(c, {"hidden_size"}, 2048);
  m.expert_intermediate_size = size_key(c, {"moe_intermediate_size"}, 1408);
  m.router.n_experts = to_int(int_key(c, "num_experts", 60), "num_experts");
  m.router.top_k = to_int(int_key(c, "num_experts_per_tok", 4), "num_experts_per_tok");
  m.router.norm_topk_prob = bool_key(c, "norm_topk_prob", false);
  m.shared_intermediate_size = size_key(c, {"shared_expert_intermediate_size"}, 5632);
  m.shared = m.shared_intermediate_size > 0 ? SharedExpertKind::sigmoid_gated : SharedExpertKind::none;
}

void parse_qwen3_moe(const json& c, MoeConfig& m) {
  m.hidden_size = size_key(c, {"hidden_size"}, 2048);
  m.expert_intermediate_size = size_key(c, {"moe_intermediate_size"}, 768);
  m.router.n_experts = to_int(int_key_any(c, {"num_experts", "num_local_experts"}, 128), "num_experts");
  m.router.top_k = to_int(int_key(c, "num_experts_per_tok", 8), "num_experts_per_tok");
  m.router.norm_topk_prob = bool_key(c, "norm_topk_prob", false);
}

void parse_olmoe(const json& c, MoeConfig& m) {
  m.hidden_size = size_key(c, {"hidden_size"}, 2048);
  m.expert_intermediate_size = size_key(c, {"intermediate_size"}, 2048);
  m.router.n_experts = to_int(int_key_any(c, {"num_experts", "num_local_experts"}, 64), "num_experts");
  m.router.top_k = to_int(int_key(c, "num_experts_per_tok", 8), "num_experts_per_tok");
  m.router.norm_topk_prob = bool_key(c, "norm_topk_prob", false);
}

void parse_deepseek_common(const json& c, MoeConfig& m, int64_t n_shared_default) {
  m.expert_intermediate_size = size_key(c, {"moe_intermediate_size"}, m.model_type == "deepseek_v2" ? 1407 : 2048);
  // An explicit null means no shared experts (DeepSeek's own code tests `is not None`).
  const bool shared_null = c.contains("n_shared_experts") && c["n_shared_experts"].is_null();
  const int64_t n_shared = shared_null ? 0 : int_key(c, "n_shared_experts", n_shared_default);
  MOE_CHECK(n_shared >= 0, "n_shared_experts must not be negative, got {}", n_shared);
  m.shared_intermediate_size = checked_mul(n_shared, m.expert_intermediate_size, "n_shared_experts x moe_intermediate_size");
  MOE_CHECK(m.shared_intermediate_size <= kMaxModelSize,
            "n_shared_experts ({}) x moe_intermediate_size ({}) = {} is out of range (at most {})", n_shared,
            m.expert_intermediate_size, m.shared_intermediate_size, kMaxModelSize);
  m.shared = m.shared_intermediate_size > 0 ? SharedExpertKind::plain : SharedExpertKind::none;
  m.first_k_dense_replace = int_key(c, "first_k_dense_replace", m.model_type == "deepseek_v2" ? 0 : 3);
}

void parse_deepseek_v2(const json& c, MoeConfig& m) {
  m.hidden_size = size_key(c, {"hidden_size"}, 4096);
  // transformers' attribute_map: num_experts -> n_routed_experts.
  m.router.n_experts = to_int(int_key_any(c, {"n_routed_experts", "num_experts"}, 64), "n_routed_experts");
  m.router.top_k = to_int(int_key(c, "num_experts_per_tok", std::nullopt), "num_experts_per_tok");
  // NOTE: transformers' DeepSeek-V2 router ignores norm_topk_prob (weights = p · routed_scaling_factor);
  // DeepSeek's own code normalises instead. Released V2 checkpoints set it false, where both agree.
  m.router.norm_topk_prob = false;
  m.router.routed_scaling_factor = float32_key(c, "routed_scaling_factor", 1.0);
  const std::string method = string_key(c, "topk_method", "greedy");
  if (method == "greedy") {
    m.router.method = RoutingMethod::softmax_topk;
  } else if (method == "group_limited_greedy") {
    m.router.method = RoutingMethod::group_limited_greedy;
    m.router.n_group = to_int(int_key(c, "n_group", std::nullopt), "n_group");
    m.router.topk_group = to_int(int_key(c, "topk_group", std::nullopt), "topk_group");
  } else {
    MOE_FAIL("deepseek_v2 topk_method '{}' is not supported: use 'greedy' or 'group_limited_greedy'", method);
  }
  parse_deepseek_common(c, m, 2);
}

void parse_deepseek_v3(const json& c, MoeConfig& m) {
  m.hidden_size = size_key(c, {"hidden_size"}, 7168);
  m.router.method = RoutingMethod::noaux_tc;  // transformers ignores topk_method and scoring_func for V3
  // transformers' attribute_map: num_local_experts -> n_routed_experts.
  m.router.n_experts = to_int(int_key_any(c, {"n_routed_experts", "num_local_experts"}, 256), "n_routed_experts");
  m.router.top_k = to_int(int_key(c, "num_experts_per_tok", 8), "num_experts_per_tok");
  m.router.n_group = to_int(int_key(c, "n_group", 8), "n_group");
  m.router.topk_group = to_int(int_key(c, "topk_group", 4), "topk_group");
  m.router.norm_topk_prob = bool_key(c, "norm_topk_prob", true);
  m.router.routed_scaling_factor = float32_key(c, "routed_scaling_factor", 2.5);
  m.router_has_correction_bias = true;
  parse_deepseek_common(c, m, 1);
}

}  // namespace

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = {"mixtral",  "qwen2_moe",   "qwen3_moe",
                                                 "olmoe",    "deepseek_v2", "deepseek_v3"};
  return types;
}

MoeConfig parse_moe_config(const json& c) {
  MOE_CHECK(c.is_object(), "config.json must hold a JSON object");
  MoeConfig m;
  m.model_type = string_key(c, "model_type", "");
  if (m.model_type == "mixtral") parse_mixtral(c, m);
  else if (m.model_type == "qwen2_moe") parse_qwen2_moe(c, m);
  else if (m.model_type == "qwen3_moe") parse_qwen3_moe(c, m);
  else if (m.model_type == "olmoe") parse_olmoe(c, m);
  else if (m.model_type == "deepseek_v2") parse_deepseek_v2(c, m);
  else if (m.model_type == "deepseek_v3") parse_deepseek_v3(c, m);
  else
    MOE_FAIL("unsupported model_type '{}': supported are {}", m.model_type,
             fmt::format("{}", fmt::join(supported_model_types(), ", ")));

  const std::string act = string_key(c, "hidden_act", "silu");
  MOE_CHECK(act == "silu" || act == "swish", "hidden_act '{}' is not supported: MoE experts here are SwiGLU (silu)",
            act);
  MOE_CHECK(m.hidden_size > 0, "config.json hidden_size must be positive, got {}", m.hidden_size);
  MOE_CHECK(m.expert_intermediate_size > 0, "the expert intermediate size must be positive, got {}",
            m.expert_intermediate_size);
  MOE_CHECK(m.shared_intermediate_size >= 0, "the shared expert intermediate size must not be negative, got {}",
            m.shared_intermediate_size);
  m.num_hidden_layers = int_key(c, "num_hidden_layers", 0);
  m.decoder_sparse_step = int_key(c, "decoder_sparse_step", 1);
  MOE_CHECK(m.decoder_sparse_step >= 1, "decoder_sparse_step must be at least 1, got {}", m.decoder_sparse_step);
  if (const auto layers = find_key(c, "mlp_only_layers")) {
    MOE_CHECK((*layers)->is_array(), "config.json key 'mlp_only_layers' must be a list of layer indices");
    for (const json& v : **layers) {
      MOE_CHECK(v.is_number_integer(), "mlp_only_layers holds {}, not a layer index", v.dump());
      m.mlp_only_layers.push_back(v.get<int64_t>());
    }
  }
  routing::validate(m.router);
  return m;
}

MoeConfig load_moe_config(const std::filesystem::path& path) {
  std::ifstream in(path);
  MOE_CHECK(in.good(), "cannot open config file '{}'", path.string());
  json c = json::parse(in, nullptr, /*allow_exceptions=*/false);
  MOE_CHECK(!c.is_discarded(), "config file '{}' is not valid JSON", path.string());
  try {
    return parse_moe_config(c);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path.filename().string(), e.what()), e.where());
  }
}

bool is_moe_layer(const MoeConfig& m, int64_t layer) {
  if (m.model_type == "deepseek_v2" || m.model_type == "deepseek_v3") return layer >= m.first_k_dense_replace;
  if (m.model_type == "qwen2_moe" || m.model_type == "qwen3_moe")
    return std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), layer) == m.mlp_only_layers.end() &&
           (layer + 1) % m.decoder_sparse_step == 0;
  return true;
}

}  // namespace moe
