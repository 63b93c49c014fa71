// Checks the float64 oracle (tests/support/moe_reference_f64) on its own: hand-worked cases with known
// numbers for each routing rule, capacity dropping, shared experts, config errors, and properties of random
// cases. The CLI tests trust this oracle, so it is checked independently of the engine.

#include "moe_reference_f64.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

#include "moe/core/check.h"
#include "random_moe_case.h"
#include "test_random.h"

namespace moe::test {
namespace {

using nlohmann::json;
using Weights = std::map<std::string, Tensor>;

Tensor f32(std::vector<int64_t> shape, std::vector<float> values) {
  return Tensor::from_f32(std::move(shape), values);
}

std::function<Tensor(const std::string&)> lookup(const Weights& w) {
  return [&w](const std::string& name) {
    const auto it = w.find(name);
    return it == w.end() ? Tensor() : it->second;
  };
}

double silu(double z) {
  return z / (1.0 + std::exp(-z));
}
double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

constexpr double kTol = 1e-12;

// Two experts, H = 2, I = 1:
//   gate = [[1, 0], [0, 2]]
//   expert 0: w1 = [1, 0], w3 = [2, 0], w2 = [1, 3]^T     expert 1: w1 = [0, 1], w3 = [0, -1], w2 = [2,
//   0.5]^T
Weights two_experts(bool mixtral_names) {
  const std::string g = mixtral_names ? "w1" : "gate_proj", u = mixtral_names ? "w3" : "up_proj",
                    d = mixtral_names ? "w2" : "down_proj";
  return {
      {"gate.weight", f32({2, 2}, {1, 0, 0, 2})},
      {"experts.0." + g + ".weight", f32({1, 2}, {1, 0})},
      {"experts.0." + u + ".weight", f32({1, 2}, {2, 0})},
      {"experts.0." + d + ".weight", f32({2, 1}, {1, 3})},
      {"experts.1." + g + ".weight", f32({1, 2}, {0, 1})},
      {"experts.1." + u + ".weight", f32({1, 2}, {0, -1})},
      {"experts.1." + d + ".weight", f32({2, 1}, {2, 0.5})},
  };
}

// y_0(x) and y_1(x) of two_experts, by hand.
std::array<double, 2> y0(double a, double b) {
  const double h = silu(a) * 2 * a;
  return {h, 3 * h};
}
std::array<double, 2> y1(double a, double b) {
  const double h = silu(b) * -b;
  return {2 * h, 0.5 * h};
}

TEST(MoeReferenceF64, MixtralTopOneHandWorked) {
  const json config = {{"model_type", "mixtral"},
                       {"hidden_size", 2},
                       {"intermediate_size", 1},
                       {"num_local_experts", 2},
                       {"num_experts_per_tok", 1}};
  const Weights w = two_experts(true);
  // Token 0: l = [1, 0.5] -> expert 0. Token 1: l = [0, 2] -> expert 1. Mixtral renormalises: weight 1.
  const Tensor x = f32({2, 2}, {1, 0.25f, 0, 1});
  const ReferenceResult r = moe_reference_f64(config, lookup(w), x);
  ASSERT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.weights[0], 1.0, kTol);
  EXPECT_NEAR(r.weights[1], 1.0, kTol);
  // silu(1) * 2 = 1.4621171572600098
  EXPECT_NEAR(r.out[0], 1.4621171572600098, kTol);
  EXPECT_NEAR(r.out[1], 3 * 1.4621171572600098, kTol);
  // Token 1, expert 1: h = silu(1) * -1; y = [2h, h/2].
  EXPECT_NEAR(r.out[2], -2 * 0.7310585786300049, kTol);
  EXPECT_NEAR(r.out[3], -0.5 * 0.7310585786300049, kTol);
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(r.dropped_pairs, 0);
}

TEST(MoeReferenceF64, OlmoeTopTwoWithoutNormalisation) {
  const json config = {{"model_type", "olmoe"}, {"hidden_size", 2},         {"intermediate_size", 1},
                       {"num_experts", 2},      {"num_experts_per_tok", 2}, {"norm_topk_prob", false}};
  const Weights w = two_experts(false);
  const Tensor x = f32({2, 2}, {1, 0.25f, 0, 1});
  const ReferenceResult r = moe_reference_f64(config, lookup(w), x);
  // Token 0: p = softmax([1, 0.5]); token 1: p = softmax([0, 2]) -> sorted [1, 0].
  const double p00 = 1 / (1 + std::exp(-0.5)), p01 = 1 - p00;
  const double p11 = 1 / (1 + std::exp(-2.0)), p10 = 1 - p11;
  ASSERT_EQ(r.ids, (std::vector<int32_t>{0, 1, 1, 0}));
  EXPECT_NEAR(r.selection_margin[0], 0.5, kTol);  // measured on logits: 1 - 0.5
  EXPECT_NEAR(r.weights[0], p00, kTol);
  EXPECT_NEAR(r.weights[1], p01, kTol);
  EXPECT_NEAR(r.weights[2], p11, kTol);
  EXPECT_NEAR(r.weights[3], p10, kTol);
  for (int h = 0; h < 2; ++h) {
    EXPECT_NEAR(r.out[h], p00 * y0(1, 0.25)[h] + p01 * y1(1, 0.25)[h], kTol);
    EXPECT_NEAR(r.out[2 + h], p11 * y1(0, 1)[h] + p10 * y0(0, 1)[h], kTol);
  }
}

TEST(MoeReferenceF64, SoftmaxTopOneWithAndWithoutNormalisation) {
  json config = {{"model_type", "qwen3_moe"},
                 {"hidden_size", 2},
                 {"moe_intermediate_size", 1},
                 {"num_local_experts", 2},
                 {"num_experts_per_tok", 1}};
  const Weights w = two_experts(false);
  const Tensor x = f32({1, 2}, {1, 0.25f});
  const double p0 = 1 / (1 + std::exp(-0.5));
  ReferenceResult r = moe_reference_f64(config, lookup(w), x);  // norm_topk_prob defaults to false
  EXPECT_NEAR(r.weights[0], p0, kTol);
  EXPECT_NEAR(r.out[0], p0 * y0(1, 0.25)[0], kTol);
  config["norm_topk_prob"] = true;
  r = moe_reference_f64(config, lookup(w), x);
  EXPECT_NEAR(r.weights[0], 1.0, kTol);
}

TEST(MoeReferenceF64, TiesGoToTheLowerIndex) {
  const json config = {{"model_type", "qwen3_moe"},
                       {"hidden_size", 1},
                       {"moe_intermediate_size", 1},
                       {"num_experts", 4},
                       {"num_experts_per_tok", 3}};
  Weights w = {{"gate.weight", f32({4, 1}, {0, 0, 0, 0})}};
  for (int e = 0; e < 4; ++e)
    for (const char* n : {"gate_proj", "up_proj", "down_proj"})
      w[fmt::format("experts.{}.{}.weight", e, n)] = f32({1, 1}, {1});
  const ReferenceResult r = moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_NEAR(r.weights[0], 0.25, kTol);
  EXPECT_EQ(r.selection_margin[0], 0.0);
  EXPECT_NEAR(r.out[0], 0.75 * silu(1), kTol);
}

// E experts of H = 1, I = 1, all with w1 = w3 = w2 = 1 (so y = silu(x) * x), gate column `gate`.
Weights unit_experts(const std::vector<float>& gate, const std::string& g = "gate_proj",
                     const std::string& u = "up_proj", const std::string& d = "down_proj") {
  const int64_t E = static_cast<int64_t>(gate.size());
  Weights w = {{"gate.weight", f32({E, 1}, gate)}};
  for (int64_t e = 0; e < E; ++e)
    for (const std::string& n : {g, u, d}) w[fmt::format("experts.{}.{}.weight", e, n)] = f32({1, 1}, {1});
  return w;
}

json deepseek_v3_config(int64_t experts, int64_t k, int64_t n_group, int64_t topk_group) {
  return {{"model_type", "deepseek_v3"}, {"hidden_size", 1},         {"moe_intermediate_size", 1},
          {"n_routed_experts", experts}, {"num_experts_per_tok", k}, {"n_shared_experts", nullptr},
          {"n_group", n_group},          {"topk_group", topk_group}};
}

TEST(MoeReferenceF64, DeepseekV3BiasChangesTheChoiceButNotTheWeight) {
  json config = deepseek_v3_config(4, 1, 1, 1);
  Weights w = unit_experts({2, 1, 0, -1});  // l = [2, 1, 0, -1] for x = 1
  w["gate.e_score_correction_bias"] = f32({4}, {0, 0, 0, 0});
  const Tensor x = f32({1, 1}, {1});
  ReferenceResult r = moe_reference_f64(config, lookup(w), x);
  EXPECT_EQ(r.ids[0], 0);
  // s = sigmoid(-1) = 0.2689; c = 1.2689 beats sigmoid(2) = 0.8808.
  w["gate.e_score_correction_bias"] = f32({4}, {0, 0, 0, 1});
  r = moe_reference_f64(config, lookup(w), x);
  EXPECT_EQ(r.ids[0], 3);
  EXPECT_NEAR(r.scores[0], sigmoid(-1) + 1, kTol);
  // norm_topk_prob (default true): s / (s + 1e-20) = 1, then x routed_scaling_factor (default 2.5).
  EXPECT_NEAR(r.weights[0], 2.5, kTol);
  EXPECT_NEAR(r.out[0], 2.5 * silu(1), kTol);
  config["norm_topk_prob"] = false;
  config["routed_scaling_factor"] = 1.5;
  r = moe_reference_f64(config, lookup(w), x);
  EXPECT_EQ(r.ids[0], 3);
  EXPECT_NEAR(r.weights[0], 1.5 * sigmoid(-1), kTol);  // the unbiased score
}

TEST(MoeReferenceF64, DeepseekV3MasksDroppedGroupsBelowNegativeScores) {
  // Groups {0, 1} and {2, 3}; keep 1 group; k = 2.
  // s = [sig(2), 0.5, 0.5, sig(-2)], bias = [0.5, -1, 0, 0] -> c = [1.381, -0.5, 0.5, 0.119].
  // Group scores (sum of the best two): 0.881 vs 0.619 -> group 0. Expert 1 (c = -0.5) must be chosen
  // over the masked experts 2 and 3: masking with 0 instead of -inf would pick expert 2.
  const json config = deepseek_v3_config(4, 2, 2, 1);
  Weights w = unit_experts({2, 0, 0, -2});
  w["gate.e_score_correction_bias"] = f32({4}, {0.5f, -1, 0, 0});
  const ReferenceResult r = moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
  ASSERT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  const double s0 = sigmoid(2), s1 = 0.5;
  EXPECT_NEAR(r.weights[0], 2.5 * s0 / (s0 + s1), kTol);
  EXPECT_NEAR(r.weights[1], 2.5 * s1 / (s0 + s1), kTol);
  EXPECT_NEAR(r.selection_margin[0], sigmoid(2) - 0.5 - sigmoid(-2), kTol);  // the two group scores
  EXPECT_NEAR(r.scores[1], -0.5, 1e-7);  // bias is stored as float: -1 exactly, 0.5 exactly
  EXPECT_NEAR(r.out[0], 2.5 * silu(1), kTol);
}

TEST(MoeReferenceF64, DeepseekV3GroupScoreIsTheSumOfTheBestTwo) {
  // s = 0.5 everywhere; c = [1.0, 0.0, 0.8, 0.7]: by max, group 0 would win; by top-2 sum, group 1 (1.5
  // > 1.0).
  json config = deepseek_v3_config(4, 1, 2, 1);
  config["routed_scaling_factor"] = 1.0;
  Weights w = unit_experts({0, 0, 0, 0});
  w["gate.e_score_correction_bias"] = f32({4}, {0.5f, -0.5f, 0.3f, 0.2f});
  ReferenceResult r = moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
  EXPECT_EQ(r.ids[0], 2);
  EXPECT_NEAR(r.weights[0], 1.0, kTol);
  // Keeping both groups, the best biased score wins.
  config["topk_group"] = 2;
  r = moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
  EXPECT_EQ(r.ids[0], 0);
}

TEST(MoeReferenceF64, DeepseekV2GroupLimitedGreedyAndIgnoredNormalisation) {
  // p = softmax([3, -5, 2, 2]); groups {0, 1}, {2, 3} scored by their max: group 0 (p0) wins, so expert 1
  // is chosen although p2 = p3 > p1. Weights are p x routed_scaling_factor; norm_topk_prob is ignored.
  json config = {{"model_type", "deepseek_v2"},
                 {"hidden_size", 1},
                 {"moe_intermediate_size", 1},
                 {"n_routed_experts", 4},
                 {"num_experts_per_tok", 2},
                 {"n_shared_experts", 0},
                 {"topk_method", "group_limited_greedy"},
                 {"n_group", 2},
                 {"topk_group", 1},
                 {"routed_scaling_factor", 16.0},
                 {"norm_topk_prob", true}};
  const Weights w = unit_experts({3, -5, 2, 2});
  const double z = std::exp(3.0) + std::exp(-5.0) + 2 * std::exp(2.0);
  const double p0 = std::exp(3.0) / z, p1 = std::exp(-5.0) / z, p2 = std::exp(2.0) / z;
  ReferenceResult r = moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
  ASSERT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.weights[0], 16 * p0, kTol);
  EXPECT_NEAR(r.weights[1], 16 * p1, kTol);
  EXPECT_NEAR(r.out[0], 16 * (p0 + p1) * silu(1), kTol);
  // Greedy: the global top-2, the tie between 2 and 3 going to 2.
  config["topk_method"] = "greedy";
  r = moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
  ASSERT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
  EXPECT_NEAR(r.weights[1], 16 * p2, kTol);
}

TEST(MoeReferenceF64, PaddedDropKeepsTheFirstTokens) {
  // Every token goes to expert 0 (l = [x, 0], x > 0). T = 3, k = 1, E = 2.
  const json config = {{"model_type", "mixtral"},
                       {"hidden_size", 1},
                       {"intermediate_size", 1},
                       {"num_local_experts", 2},
                       {"num_experts_per_tok", 1}};
  const Weights w = unit_experts({1, 0}, "w1", "w3", "w2");
  const Tensor x = f32({3, 1}, {1, 2, 3});
  const PaddedOptions half{.capacity_factor = 0.5, .renormalize = false};  // C = ceil(0.75) = 1
  ReferenceResult r = moe_reference_f64(config, lookup(w), x, &half);
  EXPECT_EQ(r.capacity, 1);
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(r.dropped_per_expert, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(r.dropped_pairs, 2);
  EXPECT_NEAR(r.out[0], silu(1), kTol);
  EXPECT_EQ(r.out[1], 0.0);
  EXPECT_EQ(r.out[2], 0.0);
  EXPECT_EQ(r.weights[1], 1.0);  // the router's weights, before dropping
  const PaddedOptions one{.capacity_factor = 1.0, .renormalize = true};  // C = ceil(1.5) = 2
  r = moe_reference_f64(config, lookup(w), x, &one);
  EXPECT_EQ(r.capacity, 2);
  EXPECT_EQ(r.dropped_pairs, 1);
  EXPECT_NEAR(r.out[1], 2 * silu(2), kTol);
  EXPECT_EQ(r.out[2], 0.0);  // nothing kept: zero even when renormalising
}

TEST(MoeReferenceF64, PaddedRenormalizeRescalesTheKeptWeights) {
  // E = 3, k = 2, T = 2, C = ceil(0.5 * 4 / 3) = 1. Token 0 -> {0, 1}, token 1 -> {0, 2}: token 1 loses
  // expert 0 (full), keeps expert 2. y_e(x) = (e + 1) * silu(x0 + x1) * (x0 + x1) on both outputs.
  const json config = {{"model_type", "olmoe"}, {"hidden_size", 2},         {"intermediate_size", 1},
                       {"num_experts", 3},      {"num_experts_per_tok", 2}, {"norm_topk_prob", false}};
  Weights w = {{"gate.weight", f32({3, 2}, {3, 3, 2, 0, 0, 2})}};
  for (int e = 0; e < 3; ++e) {
    w[fmt::format("experts.{}.gate_proj.weight", e)] = f32({1, 2}, {1, 1});
    w[fmt::format("experts.{}.up_proj.weight", e)] = f32({1, 2}, {1, 1});
    w[fmt::format("experts.{}.down_proj.weight", e)] = f32({2, 1}, {float(e + 1), float(e + 1)});
  }
  const Tensor x = f32({2, 2}, {1, 0, 0, 1});
  const double z = std::exp(3.0) + std::exp(2.0) + 1.0;
  const double q0 = std::exp(3.0) / z, q2 = std::exp(2.0) / z;  // token 1's weights for experts 0 and 2
  const double y = silu(1);                                     // silu(1) * 1
  const PaddedOptions drop{.capacity_factor = 0.5, .renormalize = false};
  ReferenceResult r = moe_reference_f64(config, lookup(w), x, &drop);
  ASSERT_EQ(r.ids, (std::vector<int32_t>{0, 1, 0, 2}));
  EXPECT_EQ(r.capacity, 1);
  EXPECT_EQ(r.dropped_pairs, 1);
  EXPECT_EQ(r.dropped_per_expert, (std::vector<int64_t>{1, 0, 0}));
  EXPECT_NEAR(r.out[2], q2 * 3 * y, kTol);
  EXPECT_NEAR(r.out[0], (q0 * 1 + q2 * 2) * y, kTol);  // token 0: l = [3, 2, 0], same p values
  const PaddedOptions renorm{.capacity_factor = 0.5, .renormalize = true};
  r = moe_reference_f64(config, lookup(w), x, &renorm);
  EXPECT_NEAR(r.out[2], (q0 + q2) * 3 * y, kTol);
  EXPECT_NEAR(r.out[0], (q0 * 1 + q2 * 2) * y, kTol);
}

TEST(MoeReferenceF64, Qwen2SharedExpertIsGated) {
  const json config = {{"model_type", "qwen2_moe"},  {"hidden_size", 1},
                       {"moe_intermediate_size", 1}, {"num_experts", 2},
                       {"num_experts_per_tok", 1},   {"shared_expert_intermediate_size", 1}};
  Weights w = unit_experts({1, 0});
  for (const char* n : {"gate_proj", "up_proj", "down_proj"})
    w[fmt::format("shared_expert.{}.weight", n)] = f32({1, 1}, {1});
  w["shared_expert_gate.weight"] = f32({1, 1}, {0.5f});
  const ReferenceResult r = moe_reference_f64(config, lookup(w), f32({1, 1}, {2}));
  const double p0 = 1 / (1 + std::exp(-2.0));  // softmax([2, 0])[0], not renormalised
  EXPECT_NEAR(r.out[0], p0 * silu(2) * 2 + sigmoid(1) * silu(2) * 2, kTol);
}

TEST(MoeReferenceF64, DeepseekSharedExpertsAreOneWideMlpAddedUnweighted) {
  // n_shared_experts = 2, moe_intermediate_size = 1: one shared MLP of intermediate 2.
  const json config = {{"model_type", "deepseek_v2"}, {"hidden_size", 1},
                       {"moe_intermediate_size", 1},  {"n_routed_experts", 2},
                       {"num_experts_per_tok", 1},    {"n_shared_experts", 2}};
  Weights w = unit_experts({1, 0});
  w["shared_experts.gate_proj.weight"] = f32({2, 1}, {1, -1});
  w["shared_experts.up_proj.weight"] = f32({2, 1}, {1, 2});
  w["shared_experts.down_proj.weight"] = f32({1, 2}, {1, 3});
  const ReferenceResult r = moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
  const double p0 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(r.out[0], p0 * silu(1) + (silu(1) * 1 + 3 * silu(-1) * 2), kTol);
  // The default (n_shared_experts absent) is 2 for deepseek_v2 as well.
  json defaulted = config;
  defaulted.erase("n_shared_experts");
  EXPECT_NEAR(moe_reference_f64(defaulted, lookup(w), f32({1, 1}, {1})).out[0], r.out[0], kTol);
  // Wrongly shaped shared weights are reported with their name.
  w["shared_experts.down_proj.weight"] = f32({1, 1}, {1});
  try {
    moe_reference_f64(config, lookup(w), f32({1, 1}, {1}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared_experts.down_proj.weight"), std::string::npos) << e.what();
  }
}

void expect_config_error(const json& config, const std::string& keyword) {
  try {
    reference_config(config);
    ADD_FAILURE() << "no error for " << config.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(keyword), std::string::npos) << e.what();
  }
}

TEST(MoeReferenceF64, ConfigErrors) {
  json c = deepseek_v3_config(8, 2, 4, 2);
  EXPECT_NO_THROW(reference_config(c));
  json bad = c;
  bad["num_experts_per_tok"] = 9;
  expect_config_error(bad, "num_experts_per_tok");
  bad = c;
  bad["n_group"] = 3;
  expect_config_error(bad, "n_group");
  bad = c;
  bad["num_experts_per_tok"] = 6;
  bad["topk_group"] = 2;
  expect_config_error(bad, "topk_group");
  bad = c;
  bad["model_type"] = "mixtral_xl";
  expect_config_error(bad, "mixtral_xl");
}

// Properties of random cases of every family: the oracle accepts what the generator makes, counts add up,
// a huge capacity drops nothing, and each token's output does not depend on the other tokens.
TEST(MoeReferenceF64, RandomCasesAreConsistent) {
  TestRng rng;
  for (const char* type : kMoeModelTypes) {
    SCOPED_TRACE(type);
    for (DType dtype : {DType::F32, DType::BF16}) {
      const MoeCase c =
          random_moe_case(type, rng, {.weight_dtype = dtype, .input_dtype = dtype, .tokens = 24});
      const auto weight = [&c](const std::string& name) { return c.weight(name); };
      const ReferenceResult r = moe_reference_f64(c.config, weight, c.x);
      const int64_t T = r.tokens, K = r.top_k, H = r.hidden;
      EXPECT_EQ(std::accumulate(r.tokens_per_expert.begin(), r.tokens_per_expert.end(), int64_t{0}), T * K);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j + 1 < K; ++j) EXPECT_GE(r.scores[t * K + j], r.scores[t * K + j + 1]);
        std::vector<int32_t> ids(r.ids.begin() + t * K, r.ids.begin() + (t + 1) * K);
        std::sort(ids.begin(), ids.end());
        EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "an expert chosen twice";
      }
      const PaddedOptions huge{.capacity_factor = 1000.0, .renormalize = false};
      const ReferenceResult p = moe_reference_f64(c.config, weight, c.x, &huge);
      EXPECT_EQ(p.dropped_pairs, 0);
      EXPECT_EQ(p.out, r.out);
      const PaddedOptions small{.capacity_factor = 0.25, .renormalize = true};
      const ReferenceResult s = moe_reference_f64(c.config, weight, c.x, &small);
      EXPECT_EQ(s.ids, r.ids);
      if (K * T > 4 * r.experts) {
        EXPECT_GT(s.dropped_pairs, 0);
      }
      const int64_t t = rng.uniform_int(0, T - 1);
      const ReferenceResult one = moe_reference_f64(c.config, weight, c.x.narrow(0, t, 1));
      for (int64_t h = 0; h < H; ++h)
        EXPECT_NEAR(one.out[h], r.out[t * H + h], 1e-12 * (1 + std::fabs(r.out[t * H + h])));
    }
  }
}

}  // namespace
}  // namespace moe::test
