#include "random_moe_case.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "moe/core/check.h"
#include "moe/core/safetensors.h"
#include "moe_reference_f64.h"

namespace moe::test {

namespace {

using nlohmann::json;

template <class T>
T pick(TestRng& rng, std::initializer_list<T> choices) {
  return *(choices.begin() + rng.uniform_int(0, static_cast<int64_t>(choices.size()) - 1));
}

bool coin(TestRng& rng) {
  return rng.uniform_int(0, 1) == 1;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

template <class T>
T pick_from(TestRng& rng, const std::vector<T>& choices) {
  return choices[rng.uniform_int(0, static_cast<int64_t>(choices.size()) - 1)];
}

// Writes `key: value`, or leaves the key out when the value is the family's default (half of the time), so
// that defaults get exercised too.
template <class T>
void set_or_default(json& config, TestRng& rng, const char* key, const T& value, const T& default_value) {
  if (value == default_value && coin(rng)) return;
  config[key] = value;
}

// The parts of a config.json every family shares (attention sizes kept consistent with H).
json base_config(const std::string& model_type, const char* architecture, int64_t hidden, TestRng& rng,
                 DType weight_dtype) {
  std::vector<int64_t> heads;
  for (int64_t h : {1, 2, 4, 8})
    if (hidden % h == 0) heads.push_back(h);
  const int64_t n_heads = pick_from(rng, heads);
  std::vector<int64_t> kv_heads;
  for (int64_t h : divisors(n_heads)) kv_heads.push_back(h);
  json c = {
      {"architectures", {architecture}},
      {"model_type", model_type},
      {"hidden_size", hidden},
      {"hidden_act", "silu"},
      {"num_hidden_layers", 4},
      {"num_attention_heads", n_heads},
      {"num_key_value_heads", pick_from(rng, kv_heads)},
      {"vocab_size", 256},
      {"max_position_embeddings", 512},
      {"rms_norm_eps", 1e-6},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", false},
      {"use_cache", true},
      {"attention_dropout", 0.0},
      {"dtype", weight_dtype == DType::BF16  ? "bfloat16"
                : weight_dtype == DType::F16 ? "float16"
                                             : "float32"},
      {"transformers_version", "5.0.0"},
  };
  // Both spellings of the rope settings occur in the wild (transformers 5 writes rope_parameters).
  if (coin(rng))
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  else
    c["rope_theta"] = 10000.0;
  return c;
}

}  // namespace

Tensor MoeCase::weight(const std::string& name) const {
  for (const auto& [n, t] : weights)
    if (n == name) return t;
  return Tensor();
}

MoeCase random_moe_case(const std::string& model_type, TestRng& rng, const CaseOptions& opt) {
  const int64_t H = rng.uniform_int(8, 96);
  const int64_t I = rng.uniform_int(4, 64);
  const int64_t E = opt.experts > 0 ? opt.experts : pick<int64_t>(rng, {3, 4, 5, 6, 8, 12, 16});
  const int64_t K = opt.top_k > 0 ? opt.top_k : rng.uniform_int(1, std::min<int64_t>(E, 8));
  const int64_t T = opt.tokens > 0 ? opt.tokens : rng.uniform_int(1, 40);
  MOE_CHECK(K <= E, "random_moe_case: top_k {} > experts {}", K, E);
  const bool norm_topk_prob = coin(rng);

  json c;
  if (model_type == "mixtral") {
    c = base_config(model_type, "MixtralForCausalLM", H, rng, opt.weight_dtype);
    c["intermediate_size"] = I;
    c["num_local_experts"] = E;
    c["num_experts_per_tok"] = K;
    c["router_aux_loss_coef"] = 0.02;
    c["output_router_logits"] = false;
    c["sliding_window"] = nullptr;
  } else if (model_type == "qwen2_moe") {
    c = base_config(model_type, "Qwen2MoeForCausalLM", H, rng, opt.weight_dtype);
    c["intermediate_size"] = rng.uniform_int(8, 64);  // dense layers only
    c["moe_intermediate_size"] = I;
    c["shared_expert_intermediate_size"] = rng.uniform_int(0, 4) == 0 ? 0 : rng.uniform_int(4, 64);
    c["num_experts"] = E;
    c["num_experts_per_tok"] = K;
    set_or_default(c, rng, "norm_topk_prob", norm_topk_prob, false);
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
    c["use_sliding_window"] = false;
    c["router_aux_loss_coef"] = 0.001;
    c["output_router_logits"] = false;
  } else if (model_type == "qwen3_moe") {
    c = base_config(model_type, "Qwen3MoeForCausalLM", H, rng, opt.weight_dtype);
    c["head_dim"] = H / c["num_attention_heads"].get<int64_t>();
    c["intermediate_size"] = rng.uniform_int(8, 64);
    c["moe_intermediate_size"] = I;
    c[coin(rng) ? "num_experts" : "num_local_experts"] = E;  // Hub configs vs transformers 5
    c["num_experts_per_tok"] = K;
    set_or_default(c, rng, "norm_topk_prob", norm_topk_prob, false);
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
    c["attention_bias"] = false;
    c["router_aux_loss_coef"] = 0.001;
    c["output_router_logits"] = false;
  } else if (model_type == "olmoe") {
    c = base_config(model_type, "OlmoeForCausalLM", H, rng, opt.weight_dtype);
    c["intermediate_size"] = I;
    c[coin(rng) ? "num_experts" : "num_local_experts"] = E;
    c["num_experts_per_tok"] = K;
    set_or_default(c, rng, "norm_topk_prob", norm_topk_prob, false);
    c["clip_qkv"] = nullptr;
    c["router_aux_loss_coef"] = 0.01;
    c["output_router_logits"] = false;
  } else if (model_type == "deepseek_v2" || model_type == "deepseek_v3") {
    const bool v3 = model_type == "deepseek_v3";
    c = base_config(model_type, v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM", H, rng,
                    opt.weight_dtype);
    c["intermediate_size"] = rng.uniform_int(8, 64);
    c["moe_intermediate_size"] = I;
    c["n_routed_experts"] = E;
    c["num_experts_per_tok"] = K;
    // n_shared_experts: absent (the default: v2 2, v3 1), null (none), or 0..2.
    switch (rng.uniform_int(0, 4)) {
      case 0:
        break;
      case 1:
        c["n_shared_experts"] = nullptr;
        break;
      default:
        c["n_shared_experts"] = rng.uniform_int(0, 2);
        break;
    }
    const double scaling = v3 ? pick<double>(rng, {2.5, 1.0, 0.5 + 2.0 * rng.uniform_int(0, 1000) / 1000.0})
                              : pick<double>(rng, {1.0, 16.0, 0.5 + 2.0 * rng.uniform_int(0, 1000) / 1000.0});
    set_or_default(c, rng, "routed_scaling_factor", scaling, v3 ? 2.5 : 1.0);
    // Groups: v3 needs at least 2 experts per group (its group score sums the best 2).
    const bool grouped = v3 || coin(rng);
    std::vector<int64_t> group_counts;
    for (int64_t g : divisors(E))
      if (!v3 || E / g >= 2) group_counts.push_back(g);
    const int64_t n_group = grouped ? pick_from(rng, group_counts) : 1;
    const int64_t group_size = E / n_group;
    const int64_t topk_group = rng.uniform_int((K + group_size - 1) / group_size, n_group);
    if (v3) {
      c["topk_method"] = "noaux_tc";
      c["scoring_func"] = "sigmoid";
      set_or_default(c, rng, "n_group", n_group, int64_t{8});
      set_or_default(c, rng, "topk_group", topk_group, int64_t{4});
      set_or_default(c, rng, "norm_topk_prob", norm_topk_prob, true);
    } else {
      c["topk_method"] = grouped ? "group_limited_greedy" : "greedy";
      if (!grouped && coin(rng)) c.erase("topk_method");
      c["scoring_func"] = "softmax";
      c["n_group"] = n_group;
      c["topk_group"] = grouped ? topk_group : 1;
      c["norm_topk_prob"] = norm_topk_prob;  // ignored by transformers' deepseek_v2
    }
    c["first_k_dense_replace"] = 0;
    c["moe_layer_freq"] = 1;
    c["kv_lora_rank"] = 16;
    c["q_lora_rank"] = nullptr;
    c["qk_nope_head_dim"] = 8;
    c["qk_rope_head_dim"] = 4;
    c["v_head_dim"] = 8;
    c["aux_loss_alpha"] = 0.001;
    c["seq_aux"] = true;
  } else {
    MOE_FAIL("random_moe_case: unknown model_type {}", model_type);
  }

  MoeCase out;
  out.config = std::move(c);
  out.weights = random_moe_weights(out.config, rng, opt.weight_dtype);
  out.x = rng.normal_tensor({T, H}, 1.0f, opt.input_dtype);  // [T, H]
  return out;
}

std::vector<std::pair<std::string, Tensor>> random_moe_weights(const json& config, TestRng& rng,
                                                               DType weight_dtype) {
  const ReferenceConfig c = reference_config(config);
  const int64_t H = c.hidden, I = c.intermediate, E = c.experts;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(H));
  std::vector<std::pair<std::string, Tensor>> w;
  // NOTE: a wide gate keeps the routing scores well apart, so fp32 and fp64 choose the same experts.
  w.emplace_back("gate.weight", rng.normal_tensor({E, H}, 3.0f * in_std, weight_dtype));  // [E, H]
  if (c.scoring == "noaux_tc")
    w.emplace_back("gate.e_score_correction_bias", rng.normal_tensor({E}, 0.1f, DType::F32));  // [E]
  const bool mixtral = c.model_type == "mixtral";
  auto add_mlp = [&](const std::string& prefix, bool mixtral_names, int64_t inter) {
    const float out_std = 1.0f / std::sqrt(static_cast<float>(inter));
    w.emplace_back(prefix + (mixtral_names ? "w1" : "gate_proj") + ".weight",
                   rng.normal_tensor({inter, H}, in_std, weight_dtype));  // [I, H]
    w.emplace_back(prefix + (mixtral_names ? "w3" : "up_proj") + ".weight",
                   rng.normal_tensor({inter, H}, in_std, weight_dtype));  // [I, H]
    w.emplace_back(prefix + (mixtral_names ? "w2" : "down_proj") + ".weight",
                   rng.normal_tensor({H, inter}, out_std, weight_dtype));  // [H, I]
  };
  for (int64_t e = 0; e < E; ++e) add_mlp(fmt::format("experts.{}.", e), mixtral, I);
  if (c.shared_intermediate > 0) {
    if (c.model_type == "qwen2_moe") {
      add_mlp("shared_expert.", false, c.shared_intermediate);
      w.emplace_back("shared_expert_gate.weight", rng.normal_tensor({1, H}, in_std, weight_dtype));  // [1, H]
    } else {
      add_mlp("shared_experts.", false, c.shared_intermediate);
    }
  }
  return w;
}

std::vector<std::pair<std::string, Tensor>> prefixed(
    const std::vector<std::pair<std::string, Tensor>>& weights, const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(weights.size());
  for (const auto& [name, t] : weights) out.emplace_back(prefix + name, t);
  return out;
}

void write_case(const std::filesystem::path& dir, const MoeCase& moe_case, const std::string& prefix) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream config(dir / "config.json");
    config << moe_case.config.dump(2) << "\n";
    MOE_CHECK(config.good(), "cannot write {}", (dir / "config.json").string());
  }
  write_safetensors(dir / "weights.safetensors", prefixed(moe_case.weights, prefix));
  write_safetensors(dir / "input.safetensors", {{"hidden_states", moe_case.x}});
}

}  // namespace moe::test
