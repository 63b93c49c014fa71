#pragma once
// Per-expert load statistics of one routing step: how many (token, expert) pairs each expert received,
// how even that is, which experts got nothing, and how many pairs a capacity limit dropped.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace moe::routing {

struct LoadStats {
  int64_t n_tokens = 0;
  int top_k = 0;
  int n_experts = 0;
  std::vector<int64_t> tokens_per_expert;   // [n_experts] routed pairs, before any capacity limit
  std::vector<int64_t> dropped_per_expert;  // [n_experts] pairs beyond capacity (all zero without a limit)
  int64_t dropped_pairs = 0;
  int64_t capacity = -1;                    // rows per expert in the padded paradigm; -1 for none
  double mean_load = 0.0;                   // n_tokens * top_k / n_experts
  double max_over_mean = 0.0;               // max load / mean load (1 = perfectly even)
  double cv = 0.0;                          // coefficient of variation: population stddev / mean
  double normalized_entropy = 0.0;          // -sum p log p / log n_experts, p = load share (1 = even)
  std::vector<int32_t> dead_experts;        // experts with no pairs
};

// Statistics of topk_ids [n_tokens, top_k]. `dropped_per_expert` [n_experts] may be empty (no drops).
LoadStats compute_load_stats(std::span<const int32_t> topk_ids, int64_t n_tokens, int top_k, int n_experts,
                             std::span<const int64_t> dropped_per_expert = {}, int64_t capacity = -1);

// The same statistics from per-expert pair counts `tokens_per_expert` [n_experts] (which must add up to
// n_tokens * top_k): for callers that accumulate counts over many steps instead of keeping every top-k id.
LoadStats load_stats_from_counts(std::span<const int64_t> tokens_per_expert, int64_t n_tokens, int top_k,
                                 std::span<const int64_t> dropped_per_expert = {}, int64_t capacity = -1);

// JSON with the field names above (the `--stats` file format).
nlohmann::json to_json(const LoadStats& stats);

}  // namespace moe::routing
