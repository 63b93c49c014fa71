#include "moe_reference_f64.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "moe/core/check.h"

namespace moe::test {

namespace {

using nlohmann::json;

// A config value that is present and not null.
const json* find_key(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t required_int(const json& config, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (const json* value = find_key(config, key)) {
      MOE_CHECK(value->is_number_integer(), "config key {} must be an integer, got {}", key, value->dump());
      return value->get<int64_t>();
    }
  }
  MOE_FAIL("config.json lacks {} for model_type {}", *keys.begin(),
           config.value("model_type", std::string("?")));
}

int64_t optional_int(const json& config, const char* key, int64_t fallback) {
  const json* value = find_key(config, key);
  if (!value) return fallback;
  MOE_CHECK(value->is_number_integer(), "config key {} must be an integer, got {}", key, value->dump());
  return value->get<int64_t>();
}

double optional_double(const json& config, const char* key, double fallback) {
  const json* value = find_key(config, key);
  if (!value) return fallback;
  MOE_CHECK(value->is_number(), "config key {} must be a number, got {}", key, value->dump());
  return value->get<double>();
}

bool optional_bool(const json& config, const char* key, bool fallback) {
  const json* value = find_key(config, key);
  if (!value) return fallback;
  MOE_CHECK(value->is_boolean(), "config key {} must be true or false, got {}", key, value->dump());
  return value->get<bool>();
}

// A tensor read as doubles after checking its shape.
std::vector<double> load_f64(const std::function<Tensor(const std::string&)>& weight, const std::string& name,
                             const std::vector<int64_t>& shape) {
  const Tensor t = weight(name);
  MOE_CHECK(t.defined(), "reference: tensor {} is missing", name);
  MOE_CHECK(t.shape() == shape, "reference: tensor {} has shape {}, expected {}", name, t.shape_string(),
            shape_to_string(shape));
  const Tensor f = t.to_f32();
  const float* p = f.data_as<float>();
  return std::vector<double>(p, p + f.numel());
}

double silu(double z) {
  return z / (1.0 + std::exp(-z));
}
double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

// One SwiGLU MLP: y = W2 (silu(W1 x) * (W3 x)).
struct Mlp {
  int64_t hidden = 0, inter = 0;
  std::vector<double> w1, w3, w2;  // [I, H], [I, H], [H, I]

  void apply(const double* x, double* y) const {  // y [H] is overwritten
    std::vector<double> act(inter);
    for (int64_t i = 0; i < inter; ++i) {
      double g = 0.0, u = 0.0;
      for (int64_t h = 0; h < hidden; ++h) {
        g += w1[i * hidden + h] * x[h];
        u += w3[i * hidden + h] * x[h];
      }
      act[i] = silu(g) * u;
    }
    for (int64_t h = 0; h < hidden; ++h) {
      double acc = 0.0;
      for (int64_t i = 0; i < inter; ++i) acc += w2[h * inter + i] * act[i];
      y[h] = acc;
    }
  }
};

Mlp load_mlp(const std::function<Tensor(const std::string&)>& weight, const std::string& prefix,
             bool mixtral_names, int64_t hidden, int64_t inter) {
  const char* gate = mixtral_names ? "w1" : "gate_proj";
  const char* up = mixtral_names ? "w3" : "up_proj";
  const char* down = mixtral_names ? "w2" : "down_proj";
  return Mlp{.hidden = hidden,
             .inter = inter,
             .w1 = load_f64(weight, prefix + gate + ".weight", {inter, hidden}),
             .w3 = load_f64(weight, prefix + up + ".weight", {inter, hidden}),
             .w2 = load_f64(weight, prefix + down + ".weight", {hidden, inter})};
}

// Indices of `scores` restricted to `allowed`, best first, ties to the lower index.
std::vector<int64_t> ranked(const std::vector<double>& scores, const std::vector<bool>& allowed) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < static_cast<int64_t>(scores.size()); ++i)
    if (allowed[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  return order;
}

}  // namespace

ReferenceConfig reference_config(const json& config) {
  MOE_CHECK(config.is_object(), "config.json must be a JSON object");
  ReferenceConfig c;
  c.model_type = config.value("model_type", std::string());
  const std::string& type = c.model_type;
  c.hidden = required_int(config, {"hidden_size"});
  c.top_k = required_int(config, {"num_experts_per_tok"});
  c.scoring = "softmax";
  if (type == "mixtral") {
    c.experts = required_int(config, {"num_local_experts"});
    c.intermediate = required_int(config, {"intermediate_size"});
    c.norm_topk_prob = true;
  } else if (type == "qwen2_moe") {
    c.experts = required_int(config, {"num_experts"});
    c.intermediate = required_int(config, {"moe_intermediate_size"});
    c.shared_intermediate = required_int(config, {"shared_expert_intermediate_size"});
    c.norm_topk_prob = optional_bool(config, "norm_topk_prob", false);
  } else if (type == "qwen3_moe") {
    c.experts = required_int(config, {"num_experts", "num_local_experts"});
    c.intermediate = required_int(config, {"moe_intermediate_size"});
    c.norm_topk_prob = optional_bool(config, "norm_topk_prob", false);
  } else if (type == "olmoe") {
    c.experts = required_int(config, {"num_experts", "num_local_experts"});
    c.intermediate = required_int(config, {"intermediate_size"});
    c.norm_topk_prob = optional_bool(config, "norm_topk_prob", false);
  } else if (type == "deepseek_v2" || type == "deepseek_v3") {
    const bool v3 = type == "deepseek_v3";
    c.experts = required_int(config, {"n_routed_experts"});
    c.intermediate = required_int(config, {"moe_intermediate_size"});
    c.shared_intermediate = optional_int(config, "n_shared_experts", v3 ? 1 : 2) * c.intermediate;
    // NOTE: a null n_shared_experts means none (transformers builds no shared MLP then).
    if (config.contains("n_shared_experts") && config["n_shared_experts"].is_null())
      c.shared_intermediate = 0;
    c.routed_scaling_factor = optional_double(config, "routed_scaling_factor", v3 ? 2.5 : 1.0);
    if (v3) {
      c.scoring = "noaux_tc";
      c.norm_topk_prob = optional_bool(config, "norm_topk_prob", true);
      c.n_group = optional_int(config, "n_group", 8);
      c.topk_group = optional_int(config, "topk_group", 4);
    } else {
      // NOTE: transformers' deepseek_v2 ignores norm_topk_prob (DeepSeek's own code does not).
      c.norm_topk_prob = false;
      const std::string method = config.value("topk_method", std::string("greedy"));
      if (method == "group_limited_greedy") {
        c.scoring = "group_limited_greedy";
        c.n_group = required_int(config, {"n_group"});
        c.topk_group = required_int(config, {"topk_group"});
      } else {
        MOE_CHECK(method == "greedy", "deepseek_v2 topk_method {} is not greedy or group_limited_greedy",
                  method);
      }
    }
  } else {
    MOE_FAIL("model_type '{}' is not an MoE model this reference knows", type);
  }
  MOE_CHECK(c.hidden > 0 && c.intermediate > 0 && c.experts > 0, "sizes must be positive");
  MOE_CHECK(c.shared_intermediate >= 0, "shared expert size must not be negative");
  MOE_CHECK(c.top_k >= 1 && c.top_k <= c.experts, "num_experts_per_tok {} must be in [1, {}]", c.top_k,
            c.experts);
  if (c.scoring != "softmax") {
    MOE_CHECK(c.n_group >= 1 && c.experts % c.n_group == 0, "n_group {} must divide the {} experts",
              c.n_group, c.experts);
    MOE_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, "topk_group {} must be in [1, n_group {}]",
              c.topk_group, c.n_group);
    MOE_CHECK(c.topk_group * (c.experts / c.n_group) >= c.top_k,
              "topk_group {} groups of {} experts cannot hold num_experts_per_tok {}", c.topk_group,
              c.experts / c.n_group, c.top_k);
    MOE_CHECK(c.scoring != "noaux_tc" || c.experts / c.n_group >= 2,
              "n_group {} leaves fewer than 2 experts per group (the group score sums the best 2)",
              c.n_group);
  }
  return c;
}

ReferenceResult moe_reference_f64(const json& hf_config,
                                  const std::function<Tensor(const std::string&)>& weight, const Tensor& x,
                                  const PaddedOptions* padded) {
  const ReferenceConfig c = reference_config(hf_config);
  const int64_t H = c.hidden, E = c.experts, K = c.top_k;
  MOE_CHECK(x.dim() == 2 && x.size(1) == H, "reference: x has shape {}, expected [T, {}]", x.shape_string(),
            H);
  MOE_CHECK(dtype_is_float(x.dtype()), "reference: x must be a float tensor");
  const int64_t T = x.size(0);
  const Tensor xf = x.to_f32();
  const std::vector<double> xs(xf.data_as<float>(), xf.data_as<float>() + xf.numel());  // [T, H]

  ReferenceResult r;
  r.tokens = T;
  r.hidden = H;
  r.top_k = K;
  r.experts = E;
  r.out.assign(T * H, 0.0);
  r.ids.assign(T * K, 0);
  r.weights.assign(T * K, 0.0);
  r.scores.assign(T * K, 0.0);
  r.selection_margin.assign(T, std::numeric_limits<double>::infinity());
  r.tokens_per_expert.assign(E, 0);
  r.dropped_per_expert.assign(E, 0);

  // Router.
  const std::vector<double> gate = load_f64(weight, "gate.weight", {E, H});  // [E, H]
  std::vector<double> bias(E, 0.0);
  if (c.scoring == "noaux_tc") bias = load_f64(weight, "gate.e_score_correction_bias", {E});
  const int64_t group_size = E / c.n_group;
  for (int64_t t = 0; t < T; ++t) {
    const double* xt = &xs[t * H];
    std::vector<double> logits(E);
    for (int64_t e = 0; e < E; ++e) {
      double acc = 0.0;
      for (int64_t h = 0; h < H; ++h) acc += gate[e * H + h] * xt[h];
      logits[e] = acc;
    }
    // The weight before normalisation, the selection score, and a key that ranks like the selection score
    // in the units an fp32 implementation rounds (logits for softmax routing) to measure how close a call is.
    std::vector<double> base(E), select(E), closeness = logits;
    if (c.scoring == "noaux_tc") {
      for (int64_t e = 0; e < E; ++e) {
        base[e] = sigmoid(logits[e]);
        closeness[e] = select[e] = base[e] + bias[e];
      }
    } else {
      const double top = *std::max_element(logits.begin(), logits.end());
      double sum = 0.0;
      for (int64_t e = 0; e < E; ++e) sum += base[e] = std::exp(logits[e] - top);
      for (int64_t e = 0; e < E; ++e) select[e] = base[e] /= sum;
    }

    double margin = std::numeric_limits<double>::infinity();
    std::vector<bool> allowed(E, true);
    if (c.scoring != "softmax" && c.topk_group < c.n_group) {
      auto group_scores = [&](const std::vector<double>& score) {
        std::vector<double> group_score(c.n_group);
        for (int64_t g = 0; g < c.n_group; ++g) {
          std::vector<double> member(score.begin() + g * group_size, score.begin() + (g + 1) * group_size);
          std::sort(member.begin(), member.end(), std::greater<>());
          group_score[g] = c.scoring == "noaux_tc" ? member[0] + member[1] : member[0];
        }
        return group_score;
      };
      const std::vector<double> group_score = group_scores(select), group_closeness = group_scores(closeness);
      const std::vector<int64_t> groups = ranked(group_score, std::vector<bool>(c.n_group, true));
      margin = group_closeness[groups[c.topk_group - 1]] - group_closeness[groups[c.topk_group]];
      for (int64_t rank = c.topk_group; rank < c.n_group; ++rank)
        for (int64_t e = groups[rank] * group_size; e < (groups[rank] + 1) * group_size; ++e)
          allowed[e] = false;
    }
    const std::vector<int64_t> order = ranked(select, allowed);
    for (int64_t j = 0; j < K && j + 1 < static_cast<int64_t>(order.size()); ++j)
      margin = std::min(margin, closeness[order[j]] - closeness[order[j + 1]]);
    r.selection_margin[t] = margin;

    double sum = 0.0;
    for (int64_t j = 0; j < K; ++j) sum += base[order[j]];
    const double epsilon = c.scoring == "noaux_tc" ? 1e-20 : 0.0;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = order[j];
      double w = base[e];
      if (c.norm_topk_prob) w /= sum + epsilon;
      r.ids[t * K + j] = static_cast<int32_t>(e);
      r.weights[t * K + j] = w * c.routed_scaling_factor;
      r.scores[t * K + j] = select[e];
      ++r.tokens_per_expert[e];
    }
  }

  // Capacity: which pairs survive, and the weights they are combined with.
  std::vector<double> combine = r.weights;  // [T * K]
  if (padded) {
    MOE_CHECK(padded->capacity_factor > 0.0, "capacity factor must be positive");
    r.capacity = static_cast<int64_t>(
        std::ceil(padded->capacity_factor * static_cast<double>(T * K) / static_cast<double>(E)));
    std::vector<int64_t> fill(E, 0);
    for (int64_t t = 0; t < T; ++t) {
      double original = 0.0, kept = 0.0;
      for (int64_t j = 0; j < K; ++j) {
        const int32_t e = r.ids[t * K + j];
        original += r.weights[t * K + j];
        if (++fill[e] > r.capacity) {
          combine[t * K + j] = 0.0;
          ++r.dropped_per_expert[e];
          ++r.dropped_pairs;
        } else {
          kept += r.weights[t * K + j];
        }
      }
      if (padded->renormalize && kept != 0.0)
        for (int64_t j = 0; j < K; ++j) combine[t * K + j] *= original / kept;
    }
  }

  // Routed experts, loaded on first use.
  const bool mixtral_names = c.model_type == "mixtral";
  std::map<int64_t, Mlp> experts;
  std::vector<double> y(H);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      if (combine[t * K + j] == 0.0) continue;
      const int64_t e = r.ids[t * K + j];
      auto it = experts.find(e);
      if (it == experts.end())
        it =
            experts
                .emplace(e, load_mlp(weight, fmt::format("experts.{}.", e), mixtral_names, H, c.intermediate))
                .first;
      it->second.apply(&xs[t * H], y.data());
      for (int64_t h = 0; h < H; ++h) r.out[t * H + h] += combine[t * K + j] * y[h];
    }
  }

  // Shared experts, never dropped.
  if (c.shared_intermediate > 0) {
    const bool qwen = c.model_type == "qwen2_moe";
    const Mlp shared =
        load_mlp(weight, qwen ? "shared_expert." : "shared_experts.", false, H, c.shared_intermediate);
    std::vector<double> shared_gate;
    if (qwen) shared_gate = load_f64(weight, "shared_expert_gate.weight", {1, H});
    for (int64_t t = 0; t < T; ++t) {
      const double* xt = &xs[t * H];
      shared.apply(xt, y.data());
      double scale = 1.0;
      if (qwen) scale = sigmoid(std::inner_product(xt, xt + H, shared_gate.begin(), 0.0));
      for (int64_t h = 0; h < H; ++h) r.out[t * H + h] += scale * y[h];
    }
  }
  return r;
}

}  // namespace moe::test
