#include "moe/layer/moe_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <optional>

#include <fmt/ranges.h>

#include "core/text_file.h"
#include "moe/core/check.h"
#include "core/json_config.h"
#include "moe/core/tensor.h"

namespace moe {

namespace {

using nlohmann::json;
using routing::RoutingMethod;
using namespace json_config;

int to_int(int64_t v, const char* key) {
  MOE_CHECK(v >= 0 && v <= (1 << 24), "config.json key '{}' = {} is out of range", key, v);
  return static_cast<int>(v);
}

// How a family chooses and weights its experts.
enum class RouterRule : uint8_t {
  softmax_topk,  // softmax over all experts, top-k
  topk_method,   // DeepSeek-V2: topk_method 'greedy' (softmax_topk) or 'group_limited_greedy'
  noaux_tc,      // DeepSeek-V3: sigmoid + correction bias, grouped top-k
};

// norm_topk_prob: read from config.json with a default, or fixed by the family (no key, or one ignored).
struct NormTopkRule {
  bool read_key;
  bool value;  // the default, or the fixed value
};

// One family's MoE keys in config.json, as transformers' configuration_<family>.py defines them. The expert
// count may have two spellings (attribute_map aliases), read under either; errors name the first.
struct MoeRules {
  const char* model_type;
  int64_t hidden_size;           // defaults of transformers' config class
  const char* intermediate_key;  // the experts' intermediate size
  int64_t intermediate_size;
  const char* expert_count_key;
  const char* expert_count_alias = nullptr;
  int64_t n_experts;
  std::optional<int64_t> top_k;  // nullopt: config.json must set num_experts_per_tok
  RouterRule router = RouterRule::softmax_topk;
  NormTopkRule norm_topk_prob = {.read_key = true, .value = false};
  std::optional<double> routed_scaling_factor = std::nullopt;  // read (with this default) where the family has it
  int64_t n_group = 0, topk_group = 0;                         // noaux_tc's defaults
  SharedExpertKind shared = SharedExpertKind::none;
  int64_t shared_default = 0;  // sigmoid_gated: shared_expert_intermediate_size; plain: n_shared_experts
  ExpertNaming naming = ExpertNaming::gate_up_down;
  MoeLayerPattern layers = MoeLayerPattern::all;
  int64_t first_k_dense_replace = 0;  // its default (after_first_k_dense)
};

const MoeRules kRules[] = {
    {.model_type = "mixtral", .hidden_size = 4096, .intermediate_key = "intermediate_size",
     .intermediate_size = 14336, .expert_count_key = "num_local_experts", .expert_count_alias = "num_experts",
     .n_experts = 8, .top_k = 2,
     .norm_topk_prob = {.read_key = false, .value = true},  // Mixtral always renormalises; it has no such key
     .naming = ExpertNaming::w1_w3_w2},
    {.model_type = "qwen2_moe", .hidden_size = 2048, .intermediate_key = "moe_intermediate_size",
     .intermediate_size = 1408, .expert_count_key = "num_experts", .n_experts = 60, .top_k = 4,
     .shared = SharedExpertKind::sigmoid_gated, .shared_default = 5632, .layers = MoeLayerPattern::sparse_step},
    {.model_type = "qwen3_moe", .hidden_size = 2048, .intermediate_key = "moe_intermediate_size",
     .intermediate_size = 768, .expert_count_key = "num_experts", .expert_count_alias = "num_local_experts",
     .n_experts = 128, .top_k = 8, .layers = MoeLayerPattern::sparse_step},
    {.model_type = "olmoe", .hidden_size = 2048, .intermediate_key = "intermediate_size", .intermediate_size = 2048,
     .expert_count_key = "num_experts", .expert_count_alias = "num_local_experts", .n_experts = 64, .top_k = 8},
    // NOTE: transformers' DeepSeek-V2 router ignores norm_topk_prob (weights = p · routed_scaling_factor);
    // DeepSeek's own code normalises instead. Released V2 checkpoints set it false, where both agree.
    {.model_type = "deepseek_v2", .hidden_size = 4096, .intermediate_key = "moe_intermediate_size",
     .intermediate_size = 1407, .expert_count_key = "n_routed_experts", .expert_count_alias = "num_experts",
     .n_experts = 64, .top_k = std::nullopt, .router = RouterRule::topk_method,
     .norm_topk_prob = {.read_key = false, .value = false}, .routed_scaling_factor = 1.0,
     .shared = SharedExpertKind::plain, .shared_default = 2, .layers = MoeLayerPattern::after_first_k_dense},
    // transformers ignores topk_method and scoring_func for V3.
    {.model_type = "deepseek_v3", .hidden_size = 7168, .intermediate_key = "moe_intermediate_size",
     .intermediate_size = 2048, .expert_count_key = "n_routed_experts", .expert_count_alias = "num_local_experts",
     .n_experts = 256, .top_k = 8, .router = RouterRule::noaux_tc, .norm_topk_prob = {.read_key = true, .value = true},
     .routed_scaling_factor = 2.5, .n_group = 8, .topk_group = 4, .shared = SharedExpertKind::plain,
     .shared_default = 1, .layers = MoeLayerPattern::after_first_k_dense, .first_k_dense_replace = 3},
};

const MoeRules* find_rules(const std::string& model_type) {
  for (const MoeRules& r : kRules)
    if (model_type == r.model_type) return &r;
  return nullptr;
}

void parse_router(const json& c, const MoeRules& r, MoeConfig& m) {
  const int64_t n_experts = r.expert_count_alias
                                ? get_int_any(c, {r.expert_count_key, r.expert_count_alias}, r.n_experts)
                                : get_int(c, r.expert_count_key, r.n_experts);
  m.router.n_experts = to_int(
      n_experts, r.expert_count_alias ? given_key(c, {r.expert_count_key, r.expert_count_alias}) : r.expert_count_key);
  m.router.top_k = to_int(get_int(c, "num_experts_per_tok", r.top_k), "num_experts_per_tok");
  if (r.router == RouterRule::noaux_tc) {
    m.router.method = RoutingMethod::noaux_tc;
    m.router.n_group = to_int(get_int(c, "n_group", r.n_group), "n_group");
    m.router.topk_group = to_int(get_int(c, "topk_group", r.topk_group), "topk_group");
    m.router_has_correction_bias = true;  // gate.e_score_correction_bias
  }
  m.router.norm_topk_prob =
      r.norm_topk_prob.read_key ? get_bool(c, "norm_topk_prob", r.norm_topk_prob.value) : r.norm_topk_prob.value;
  if (r.routed_scaling_factor)
    m.router.routed_scaling_factor = get_float32(c, "routed_scaling_factor", *r.routed_scaling_factor);
  if (r.router == RouterRule::topk_method) {
    const std::string method = get_string(c, "topk_method", "greedy");
    if (method == "greedy") {
      m.router.method = RoutingMethod::softmax_topk;
    } else if (method == "group_limited_greedy") {
      m.router.method = RoutingMethod::group_limited_greedy;
      m.router.n_group = to_int(get_int(c, "n_group", std::nullopt), "n_group");
      m.router.topk_group = to_int(get_int(c, "topk_group", std::nullopt), "topk_group");
    } else {
      MOE_FAIL("{} topk_method '{}' is not supported: use 'greedy' or 'group_limited_greedy'", r.model_type, method);
    }
  }
}

void parse_shared(const json& c, const MoeRules& r, MoeConfig& m) {
  if (r.shared == SharedExpertKind::sigmoid_gated) {
    m.shared_intermediate_size = get_size(c, "shared_expert_intermediate_size", r.shared_default);
  } else if (r.shared == SharedExpertKind::plain) {
    // n_shared_experts experts fused into one MLP. An explicit null means none (DeepSeek's own code tests
    // `is not None`).
    const bool shared_null = c.contains("n_shared_experts") && c["n_shared_experts"].is_null();
    const int64_t n_shared = shared_null ? 0 : get_int(c, "n_shared_experts", r.shared_default);
    MOE_CHECK(n_shared >= 0, "n_shared_experts must not be negative, got {}", n_shared);
    m.shared_intermediate_size =
        checked_mul(n_shared, m.expert_intermediate_size, "n_shared_experts x moe_intermediate_size");
    MOE_CHECK(m.shared_intermediate_size <= kMaxConfigSize,
              "n_shared_experts ({}) x moe_intermediate_size ({}) = {} is out of range (at most {})", n_shared,
              m.expert_intermediate_size, m.shared_intermediate_size, kMaxConfigSize);
  }
  m.shared = m.shared_intermediate_size > 0 ? r.shared : SharedExpertKind::none;
}

}  // namespace

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out;
    for (const MoeRules& r : kRules) out.emplace_back(r.model_type);
    return out;
  }();
  return types;
}

MoeConfig parse_moe_config(const json& c) {
  MOE_CHECK(c.is_object(), "config.json must hold a JSON object");
  MoeConfig m;
  m.model_type = get_string(c, "model_type", "");
  MOE_CHECK(!m.model_type.empty(), "config.json has no 'model_type': it must name the model family, one of {}",
            fmt::format("{}", fmt::join(supported_model_types(), ", ")));
  const MoeRules* rules = find_rules(m.model_type);
  if (!rules)
    MOE_FAIL("unsupported model_type '{}': supported are {}", m.model_type,
             fmt::format("{}", fmt::join(supported_model_types(), ", ")));
  const MoeRules& r = *rules;
  m.hidden_size = get_size(c, "hidden_size", r.hidden_size);
  // NOTE: DeepSeek reads its experts' size after the router keys, with the shared experts it multiplies.
  const bool plain_shared = r.shared == SharedExpertKind::plain;
  if (!plain_shared) m.expert_intermediate_size = get_size(c, r.intermediate_key, r.intermediate_size);
  parse_router(c, r, m);
  if (plain_shared) m.expert_intermediate_size = get_size(c, r.intermediate_key, r.intermediate_size);
  parse_shared(c, r, m);
  m.naming = r.naming;
  m.intermediate_key = r.intermediate_key;
  m.layers = r.layers;
  if (r.layers == MoeLayerPattern::after_first_k_dense)
    m.first_k_dense_replace = get_int(c, "first_k_dense_replace", r.first_k_dense_replace);

  const std::string act = get_string(c, "hidden_act", "silu");
  MOE_CHECK(act == "silu" || act == "swish", "hidden_act '{}' is not supported: MoE experts here are SwiGLU (silu)",
            act);
  MOE_CHECK(m.hidden_size > 0, "config.json hidden_size must be positive, got {}", m.hidden_size);
  MOE_CHECK(m.expert_intermediate_size > 0, "the expert intermediate size must be positive, got {}",
            m.expert_intermediate_size);
  MOE_CHECK(m.shared_intermediate_size >= 0, "the shared expert intermediate size must not be negative, got {}",
            m.shared_intermediate_size);
  m.num_hidden_layers = get_int(c, "num_hidden_layers", 0);
  m.decoder_sparse_step = get_int(c, "decoder_sparse_step", 1);
  MOE_CHECK(m.decoder_sparse_step >= 1, "decoder_sparse_step must be at least 1, got {}", m.decoder_sparse_step);
  if (const json* layers = find(c, "mlp_only_layers")) {
    MOE_CHECK(layers->is_array(), "config.json key 'mlp_only_layers' must be a list of layer indices");
    for (const json& v : *layers) {
      MOE_CHECK(v.is_number_integer(), "mlp_only_layers holds {}, not a layer index", v.dump());
      m.mlp_only_layers.push_back(v.get<int64_t>());
    }
  }
  m.quant = quant::parse_quant_scheme(c);
  routing::validate(m.router);
  return m;
}

MoeConfig load_moe_config(const std::filesystem::path& path) {
  const json c = read_json_file(path, "config file");
  try {
    return parse_moe_config(c);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path.filename().string(), e.what()), e.where());
  }
}

bool is_moe_layer(const MoeConfig& m, int64_t layer) {
  switch (m.layers) {
    case MoeLayerPattern::all:
      return true;
    case MoeLayerPattern::after_first_k_dense:
      return layer >= m.first_k_dense_replace;
    case MoeLayerPattern::sparse_step:
      return std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), layer) == m.mlp_only_layers.end() &&
             (layer + 1) % m.decoder_sparse_step == 0;
  }
  return true;
}

}  // namespace moe
