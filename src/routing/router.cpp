#include "moe/routing/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "moe/core/check.h"

namespace moe::routing {

std::string_view routing_method_name(RoutingMethod m) {
  switch (m) {
    case RoutingMethod::softmax_topk: return "softmax_topk";
    case RoutingMethod::group_limited_greedy: return "group_limited_greedy";
    case RoutingMethod::noaux_tc: return "noaux_tc";
    case RoutingMethod::topk_softmax: return "topk_softmax";
  }
  return "?";
}

namespace {

bool uses_groups(RoutingMethod m) {
  return m == RoutingMethod::group_limited_greedy || m == RoutingMethod::noaux_tc;
}

// Indices of the `k` largest of score[candidates], best first; ties go to the lower index.
void top_k_indices(std::span<const float> score, std::vector<int32_t>& candidates, int k) {
  std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  candidates.resize(k);
}

// The experts of the `topk_group` groups with the best group score, in index order.
std::vector<int32_t> experts_of_best_groups(const RouterConfig& c, std::span<const float> group_score) {
  std::vector<int32_t> groups(c.n_group);
  std::iota(groups.begin(), groups.end(), 0);
  top_k_indices(group_score, groups, c.topk_group);
  std::sort(groups.begin(), groups.end());
  const int group_size = c.n_experts / c.n_group;
  std::vector<int32_t> experts;
  experts.reserve(static_cast<size_t>(c.topk_group) * group_size);
  for (int32_t g : groups)
    for (int i = 0; i < group_size; ++i) experts.push_back(g * group_size + i);
  return experts;
}

double sum_of(std::span<const double> values) { return std::accumulate(values.begin(), values.end(), 0.0); }

// One token. `logits` [n_experts]; writes ids [top_k] and weights [top_k].
void route_token(const RouterConfig& c, std::span<const float> logits, std::span<const float> bias,
                 std::span<int32_t> ids, std::span<float> weights) {
  const int E = c.n_experts, k = c.top_k;
  std::vector<int32_t> candidates(E);
  std::iota(candidates.begin(), candidates.end(), 0);
  std::vector<double> w(k);

  switch (c.method) {
    case RoutingMethod::softmax_topk:
    case RoutingMethod::group_limited_greedy: {
      // softmax is monotone: the top-k (and each group's max) of p are those of the logits.
      if (c.method == RoutingMethod::group_limited_greedy) {
        const int group_size = E / c.n_group;
        std::vector<float> group_max(c.n_group);
        for (int g = 0; g < c.n_group; ++g)
          group_max[g] = *std::max_element(logits.begin() + g * group_size, logits.begin() + (g + 1) * group_size);
        candidates = experts_of_best_groups(c, group_max);
      }
      top_k_indices(logits, candidates, k);
      const double max_logit = *std::max_element(logits.begin(), logits.end());
      double denominator = 0.0;
      for (float l : logits) denominator += std::exp(double{l} - max_logit);
      for (int j = 0; j < k; ++j) w[j] = std::exp(double{logits[candidates[j]]} - max_logit) / denominator;
      if (c.norm_topk_prob) {
        const double total = sum_of(w);
        for (double& x : w) x /= total;
      }
      break;
    }
    case RoutingMethod::noaux_tc: {
      // fp32 like the reference: s = sigmoid(l), choice score = s + bias, group score = top-2 sum.
      std::vector<float> s(E), choice(E);
      for (int e = 0; e < E; ++e) {
        s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-double{logits[e]})));
        choice[e] = s[e] + (bias.empty() ? 0.0f : bias[e]);
      }
      const int group_size = E / c.n_group;
      std::vector<float> group_score(c.n_group);
      for (int g = 0; g < c.n_group; ++g) {
        std::vector<int32_t> members(group_size);
        std::iota(members.begin(), members.end(), g * group_size);
        top_k_indices(choice, members, 2);
        group_score[g] = choice[members[0]] + choice[members[1]];
      }
      candidates = experts_of_best_groups(c, group_score);
      top_k_indices(choice, candidates, k);
      for (int j = 0; j < k; ++j) w[j] = s[candidates[j]];
      if (c.norm_topk_prob) {
        const double denominator = sum_of(w) + 1e-20;
        for (double& x : w) x /= denominator;
      }
      break;
    }
    case RoutingMethod::topk_softmax: {
      top_k_indices(logits, candidates, k);
      const double best = logits[candidates[0]];
      double denominator = 0.0;
      for (int j = 0; j < k; ++j) denominator += (w[j] = std::exp(double{logits[candidates[j]]} - best));
      for (double& x : w) x /= denominator;
      break;
    }
  }
  for (int j = 0; j < k; ++j) {
    ids[j] = candidates[j];
    weights[j] = static_cast<float>(w[j] * double{c.routed_scaling_factor});
  }
}

}  // namespace

void validate(const RouterConfig& c) {
  MOE_CHECK(c.n_experts >= 1, "the number of routed experts is {}: a MoE block needs at least one", c.n_experts);
  MOE_CHECK(c.top_k >= 1 && c.top_k <= c.n_experts,
            "num_experts_per_tok (k = {}) must be between 1 and the number of experts ({})", c.top_k, c.n_experts);
  MOE_CHECK(std::isfinite(c.routed_scaling_factor), "routed_scaling_factor is {}: it must be a finite number",
            c.routed_scaling_factor);
  if (!uses_groups(c.method)) return;
  MOE_CHECK(c.n_group >= 1 && c.n_experts % c.n_group == 0,
            "n_group ({}) must divide the number of experts ({}) into equal groups", c.n_group, c.n_experts);
  MOE_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, "topk_group ({}) must be between 1 and n_group ({})",
            c.topk_group, c.n_group);
  const int group_size = c.n_experts / c.n_group;
  MOE_CHECK(static_cast<int64_t>(c.topk_group) * group_size >= c.top_k,
            "topk_group ({}) keeps only {} experts (groups of {}), fewer than num_experts_per_tok ({}): raise "
            "topk_group or lower k",
            c.topk_group, c.topk_group * group_size, group_size, c.top_k);
  MOE_CHECK(c.method != RoutingMethod::noaux_tc || group_size >= 2,
            "n_group ({}) leaves {} expert per group, but noaux_tc scores a group by its top-2 experts: use "
            "n_group <= {}",
            c.n_group, group_size, c.n_experts / 2);
}

void route(const RouterConfig& c, std::span<const float> logits, std::span<const float> correction_bias,
           int64_t n_tokens, std::span<int32_t> topk_ids, std::span<float> topk_weights) {
  validate(c);
  const int64_t E = c.n_experts, k = c.top_k;
  MOE_CHECK(static_cast<int64_t>(logits.size()) == n_tokens * E, "router logits hold {} values, expected {} x {}",
            logits.size(), n_tokens, E);
  MOE_CHECK(static_cast<int64_t>(topk_ids.size()) == n_tokens * k &&
                static_cast<int64_t>(topk_weights.size()) == n_tokens * k,
            "top-k outputs must hold {} x {} values", n_tokens, k);
  MOE_CHECK(correction_bias.empty() || static_cast<int64_t>(correction_bias.size()) == E,
            "e_score_correction_bias has {} values for {} experts", correction_bias.size(), E);
  for (size_t e = 0; e < correction_bias.size(); ++e)
    MOE_CHECK(std::isfinite(correction_bias[e]), "e_score_correction_bias[{}] is {}: the checkpoint is corrupt", e,
              correction_bias[e]);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto row = logits.subspan(t * E, E);
    for (int64_t e = 0; e < E; ++e)
      MOE_CHECK(std::isfinite(row[e]),
                "router logit of token {} for expert {} is {}: the hidden_states or gate.weight contain NaN/Inf", t,
                e, row[e]);
    route_token(c, row, correction_bias, topk_ids.subspan(t * k, k), topk_weights.subspan(t * k, k));
  }
}

}  // namespace moe::routing
