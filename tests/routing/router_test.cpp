#include "moe/routing/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "test_random.h"

namespace moe::routing {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed run(const RouterConfig& c, std::vector<float> logits, std::vector<float> bias = {}) {
  const int64_t T = static_cast<int64_t>(logits.size()) / c.n_experts;
  Routed r{std::vector<int32_t>(T * c.top_k, -7), std::vector<float>(T * c.top_k, NAN)};
  route(c, logits, bias, T, r.ids, r.weights);
  return r;
}

RouterConfig softmax_config(int E, int k, bool norm) {
  return {.method = RoutingMethod::softmax_topk, .n_experts = E, .top_k = k, .norm_topk_prob = norm};
}

TEST(Router, SoftmaxTopkHandWorked) {
  const Routed r = run(softmax_config(4, 2, false), {1, 2, 3, 0});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1.0;
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(r.weights[0], std::exp(3.0) / z, 1e-7);
  EXPECT_NEAR(r.weights[1], std::exp(2.0) / z, 1e-7);
}

TEST(Router, SoftmaxTopkRenormalisedEqualsSoftmaxOfChosen) {
  const Routed r = run(softmax_config(4, 2, true), {1, 2, 3, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(r.weights[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
  EXPECT_NEAR(r.weights[1], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
}

TEST(Router, TiesGoToTheLowerIndex) {
  const Routed r = run(softmax_config(4, 2, false), {1, 1, 1, 1, 0, 2, 2, 2});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.25f);
}

TEST(Router, ScalingFactorAppliesAfterNormalisation) {
  RouterConfig c = softmax_config(4, 2, true);
  c.routed_scaling_factor = 2.0f;
  const Routed r = run(c, {0, 0, 5, 5});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_FLOAT_EQ(r.weights[0], 1.0f);
  EXPECT_FLOAT_EQ(r.weights[1], 1.0f);
}

TEST(Router, GroupLimitedGreedyKeepsOnlyTheBestGroups) {
  // Groups of 2: maxima 5, 1, 4.9, 0. One group kept: experts 0 and 1, although expert 4 beats expert 1.
  const RouterConfig c{.method = RoutingMethod::group_limited_greedy,
                       .n_experts = 8, .top_k = 2, .routed_scaling_factor = 1.5f, .n_group = 4, .topk_group = 1};
  const std::vector<float> logits = {5, 0, 1, 1, 4.9f, -3, 0, 0};
  const Routed r = run(c, logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  double z = 0;
  for (float l : logits) z += std::exp(double{l});
  EXPECT_NEAR(r.weights[0], 1.5 * std::exp(5.0) / z, 1e-6);  // softmax over all experts, times the factor
  EXPECT_NEAR(r.weights[1], 1.5 * 1.0 / z, 1e-6);
  EXPECT_EQ(run(softmax_config(8, 2, false), logits).ids, (std::vector<int32_t>{0, 4}));
}

TEST(Router, NoauxTcUsesBiasToChooseAndSigmoidToWeigh) {
  // s = 0.5 everywhere; c = s + bias. Group sums of top-2: 1.1, 1.1, 1.0, 1.1 -> groups 0 and 1 (ties low).
  const RouterConfig c{.method = RoutingMethod::noaux_tc, .n_experts = 8, .top_k = 2, .norm_topk_prob = true,
                       .routed_scaling_factor = 2.5f, .n_group = 4, .topk_group = 2};
  const Routed r = run(c, std::vector<float>(8, 0.0f), {0, 0.1f, -0.2f, 0.3f, 0, 0, 0.05f, 0.05f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 1}));
  EXPECT_FLOAT_EQ(r.weights[0], 1.25f);
  EXPECT_FLOAT_EQ(r.weights[1], 1.25f);
}

TEST(Router, NoauxTcWithoutNormalisationStillScales) {
  const RouterConfig c{.method = RoutingMethod::noaux_tc, .n_experts = 4, .top_k = 1, .norm_topk_prob = false,
                       .routed_scaling_factor = 2.0f, .n_group = 1, .topk_group = 1};
  const Routed r = run(c, {0, 1, 0, 0});
  EXPECT_EQ(r.ids[0], 1);
  EXPECT_NEAR(r.weights[0], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(Router, NoauxTcNeverPicksExpertsOfDroppedGroups) {
  // Kept group 1 has only negative choice scores; masking the other group with 0 instead of -inf would
  // wrongly pick experts 0 and 1.
  const RouterConfig c{.method = RoutingMethod::noaux_tc, .n_experts = 6, .top_k = 2, .norm_topk_prob = true,
                       .routed_scaling_factor = 1.0f, .n_group = 2, .topk_group = 1};
  const Routed r = run(c, {-30, -30, -30, -30, -30, -30}, {-2, -2, -2, -0.5f, -0.6f, -0.7f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 4}));
  EXPECT_NEAR(r.weights[0], 0.5, 1e-6);
}

TEST(Router, TopkSoftmaxIsSoftmaxOverTheChosenLogits) {
  const RouterConfig c{.method = RoutingMethod::topk_softmax, .n_experts = 3, .top_k = 2};
  const Routed r = run(c, {1, 3, 2});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
  EXPECT_NEAR(r.weights[1], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
}

void expect_error(const RouterConfig& c, std::vector<float> logits, const std::string& phrase) {
  try {
    run(c, std::move(logits));
    ADD_FAILURE() << "no error; expected one mentioning " << phrase;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(Router, BadConfigsAndLogitsAreNamed) {
  expect_error(softmax_config(4, 5, false), std::vector<float>(4), "num_experts_per_tok");
  expect_error(softmax_config(4, 0, false), std::vector<float>(4), "num_experts_per_tok");
  RouterConfig groups{.method = RoutingMethod::noaux_tc, .n_experts = 8, .top_k = 4, .n_group = 3, .topk_group = 1};
  expect_error(groups, std::vector<float>(8), "n_group");
  groups.n_group = 4;
  expect_error(groups, std::vector<float>(8), "topk_group");
  groups.topk_group = 5;
  expect_error(groups, std::vector<float>(8), "topk_group");
  groups = {.method = RoutingMethod::noaux_tc, .n_experts = 4, .top_k = 1, .n_group = 4, .topk_group = 1};
  expect_error(groups, std::vector<float>(4), "n_group");
  expect_error(softmax_config(4, 2, false), {0, NAN, 0, 0}, "NaN");
  expect_error(softmax_config(4, 2, false), {0, 0, INFINITY, 0}, "NaN/Inf");
}

// A plain reference: score every expert, mask dropped groups to -inf, sort all, take k.
Routed plain_reference(const RouterConfig& c, const std::vector<float>& logits, const std::vector<float>& bias) {
  const int E = c.n_experts, k = c.top_k, T = static_cast<int>(logits.size()) / E;
  Routed r;
  for (int t = 0; t < T; ++t) {
    std::vector<double> prob(E), choice(E);
    double z = 0;
    for (int e = 0; e < E; ++e) z += std::exp(double{logits[t * E + e]});
    for (int e = 0; e < E; ++e) {
      const double l = logits[t * E + e];
      prob[e] = c.method == RoutingMethod::noaux_tc ? 1.0 / (1.0 + std::exp(-l)) : std::exp(l) / z;
      choice[e] = c.method == RoutingMethod::noaux_tc ? double(float(prob[e]) + (bias.empty() ? 0.f : bias[e]))
                  : c.method == RoutingMethod::topk_softmax ? l
                                                            : prob[e];
    }
    if (c.method == RoutingMethod::group_limited_greedy || c.method == RoutingMethod::noaux_tc) {
      const int size = E / c.n_group;
      std::vector<std::pair<double, int>> groups;
      for (int g = 0; g < c.n_group; ++g) {
        std::vector<double> member(choice.begin() + g * size, choice.begin() + (g + 1) * size);
        std::sort(member.rbegin(), member.rend());
        groups.push_back({c.method == RoutingMethod::noaux_tc ? member[0] + member[1] : member[0], g});
      }
      std::stable_sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first; });
      for (int i = c.topk_group; i < c.n_group; ++i)
        for (int e = 0; e < size; ++e) choice[groups[i].second * size + e] = -INFINITY;
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return choice[a] > choice[b]; });
    std::vector<double> w(k);
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += (w[j] = c.method == RoutingMethod::topk_softmax
                                                   ? std::exp(double{logits[t * E + order[j]]})
                                                   : prob[order[j]]);
    for (int j = 0; j < k; ++j) {
      const bool normalise = c.norm_topk_prob || c.method == RoutingMethod::topk_softmax;
      r.ids.push_back(order[j]);
      r.weights.push_back(float(w[j] / (normalise ? sum : 1.0) * c.routed_scaling_factor));
    }
  }
  return r;
}

TEST(Router, RandomCasesMatchAPlainReference) {
  test::TestRng rng;
  const RoutingMethod methods[] = {RoutingMethod::softmax_topk, RoutingMethod::group_limited_greedy,
                                   RoutingMethod::noaux_tc, RoutingMethod::topk_softmax};
  for (int trial = 0; trial < 400; ++trial) {
    RouterConfig c{.method = methods[trial % 4]};
    const int group_sizes[] = {2, 3, 4, 8};
    c.n_group = static_cast<int>(rng.uniform_int(1, 8));
    c.n_experts = c.n_group * group_sizes[rng.uniform_int(0, 3)];
    c.topk_group = static_cast<int>(rng.uniform_int(1, c.n_group));
    c.top_k = static_cast<int>(rng.uniform_int(1, std::min(8, c.topk_group * (c.n_experts / c.n_group))));
    c.norm_topk_prob = rng.uniform_int(0, 1) == 1;
    c.routed_scaling_factor = rng.uniform_int(0, 1) ? 1.0f : 2.5f;
    const int T = static_cast<int>(rng.uniform_int(1, 9));
    const std::vector<float> logits = rng.normal_vector(T * c.n_experts, 2.0f);
    const std::vector<float> bias = c.method == RoutingMethod::noaux_tc ? rng.normal_vector(c.n_experts, 0.1f)
                                                                        : std::vector<float>{};
    const Routed got = run(c, logits, bias);
    const Routed want = plain_reference(c, logits, bias);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " method " << routing_method_name(c.method) << " E "
                                      << c.n_experts << " k " << c.top_k);
    ASSERT_EQ(got.ids, want.ids);
    for (size_t i = 0; i < got.weights.size(); ++i) ASSERT_NEAR(got.weights[i], want.weights[i], 1e-6);
  }
}

}  // namespace
}  // namespace moe::routing
