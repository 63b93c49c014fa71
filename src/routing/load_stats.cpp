#include "moe/routing/load_stats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "moe/core/check.h"

namespace moe::routing {

LoadStats compute_load_stats(std::span<const int32_t> topk_ids, int64_t n_tokens, int top_k, int n_experts,
                             std::span<const int64_t> dropped_per_expert, int64_t capacity) {
  MOE_CHECK(static_cast<int64_t>(topk_ids.size()) == n_tokens * top_k, "topk_ids hold {} ids, expected {} x {}",
            topk_ids.size(), n_tokens, top_k);
  std::vector<int64_t> counts(n_experts, 0);
  for (int32_t e : topk_ids) {
    MOE_CHECK(e >= 0 && e < n_experts, "expert id {} out of range [0, {})", e, n_experts);
    ++counts[e];
  }
  return load_stats_from_counts(counts, n_tokens, top_k, dropped_per_expert, capacity);
}

LoadStats load_stats_from_counts(std::span<const int64_t> tokens_per_expert, int64_t n_tokens, int top_k,
                                 std::span<const int64_t> dropped_per_expert, int64_t capacity) {
  const int n_experts = static_cast<int>(tokens_per_expert.size());
  int64_t pairs = 0;
  for (int64_t c : tokens_per_expert) {
    MOE_CHECK(c >= 0, "negative expert count {}", c);
    pairs += c;
  }
  MOE_CHECK(pairs == n_tokens * top_k, "expert counts add up to {} pairs, expected {} tokens x top-{} = {}", pairs,
            n_tokens, top_k, n_tokens * top_k);
  LoadStats s;
  s.n_tokens = n_tokens;
  s.top_k = top_k;
  s.n_experts = n_experts;
  s.capacity = capacity;
  s.tokens_per_expert.assign(tokens_per_expert.begin(), tokens_per_expert.end());
  s.dropped_per_expert.assign(n_experts, 0);
  if (!dropped_per_expert.empty()) {
    MOE_CHECK(static_cast<int>(dropped_per_expert.size()) == n_experts, "dropped counts for {} experts, expected {}",
              dropped_per_expert.size(), n_experts);
    std::copy(dropped_per_expert.begin(), dropped_per_expert.end(), s.dropped_per_expert.begin());
  }
  for (int64_t d : s.dropped_per_expert) s.dropped_pairs += d;

  const double total = static_cast<double>(n_tokens) * top_k;
  s.mean_load = total / n_experts;
  double variance = 0.0, entropy = 0.0;
  int64_t max_load = 0;
  for (int e = 0; e < n_experts; ++e) {
    const auto load = s.tokens_per_expert[e];
    max_load = std::max(max_load, load);
    variance += (load - s.mean_load) * (load - s.mean_load);
    if (load == 0) s.dead_experts.push_back(e);
    if (load > 0) entropy -= (load / total) * std::log(load / total);
  }
  if (total > 0) {
    s.max_over_mean = max_load / s.mean_load;
    s.cv = std::sqrt(variance / n_experts) / s.mean_load;
    s.normalized_entropy = n_experts > 1 ? entropy / std::log(static_cast<double>(n_experts)) : 1.0;
  }
  return s;
}

nlohmann::json to_json(const LoadStats& s) {
  nlohmann::json j = {
      {"n_tokens", s.n_tokens},
      {"top_k", s.top_k},
      {"n_experts", s.n_experts},
      {"tokens_per_expert", s.tokens_per_expert},
      {"dropped_pairs", s.dropped_pairs},
      {"dropped_per_expert", s.dropped_per_expert},
      {"capacity", s.capacity >= 0 ? nlohmann::json(s.capacity) : nlohmann::json(nullptr)},
      {"mean_load", s.mean_load},
      {"max_over_mean", s.max_over_mean},
      {"cv", s.cv},
      {"normalized_entropy", s.normalized_entropy},
      {"dead_experts", s.dead_experts},
  };
  return j;
}

}  // namespace moe::routing
