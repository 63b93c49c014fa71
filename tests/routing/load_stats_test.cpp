#include "moe/routing/load_stats.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "moe/core/check.h"

namespace moe::routing {
namespace {

TEST(LoadStats, CountsImbalanceEntropyAndDeadExperts) {
  // 4 tokens, k = 2, 4 experts: loads 4, 3, 1, 0.
  const std::vector<int32_t> ids = {0, 1, 0, 1, 0, 2, 0, 1};
  const LoadStats s = compute_load_stats(ids, 4, 2, 4);
  EXPECT_EQ(s.tokens_per_expert, (std::vector<int64_t>{4, 3, 1, 0}));
  EXPECT_DOUBLE_EQ(s.mean_load, 2.0);
  EXPECT_DOUBLE_EQ(s.max_over_mean, 2.0);
  EXPECT_NEAR(s.cv, std::sqrt((4.0 + 1.0 + 1.0 + 4.0) / 4.0) / 2.0, 1e-12);
  const double entropy = -(0.5 * std::log(0.5) + 0.375 * std::log(0.375) + 0.125 * std::log(0.125));
  EXPECT_NEAR(s.normalized_entropy, entropy / std::log(4.0), 1e-12);
  EXPECT_EQ(s.dead_experts, (std::vector<int32_t>{3}));
  EXPECT_EQ(s.dropped_pairs, 0);
}

TEST(LoadStats, EvenLoadIsPerfect) {
  const std::vector<int32_t> ids = {0, 1, 2, 3, 0, 1, 2, 3};
  const LoadStats s = compute_load_stats(ids, 2, 4, 4);
  EXPECT_DOUBLE_EQ(s.max_over_mean, 1.0);
  EXPECT_DOUBLE_EQ(s.cv, 0.0);
  EXPECT_NEAR(s.normalized_entropy, 1.0, 1e-12);
  EXPECT_TRUE(s.dead_experts.empty());
}

TEST(LoadStats, DropsAndJson) {
  const std::vector<int32_t> ids = {0, 0, 0, 1};
  const std::vector<int64_t> dropped = {1, 0};
  const LoadStats s = compute_load_stats(ids, 4, 1, 2, dropped, 2);
  EXPECT_EQ(s.dropped_pairs, 1);
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j["tokens_per_expert"], (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(j["dropped_pairs"], 1);
  EXPECT_EQ(j["capacity"], 2);
  EXPECT_EQ(j["dead_experts"].size(), 0u);
  EXPECT_TRUE(to_json(compute_load_stats(ids, 4, 1, 2))["capacity"].is_null());
}

TEST(LoadStats, NoTokensAndBadIds) {
  const LoadStats s = compute_load_stats({}, 0, 2, 3);
  EXPECT_EQ(s.dead_experts.size(), 3u);
  EXPECT_DOUBLE_EQ(s.max_over_mean, 0.0);
  const std::vector<int32_t> bad = {5};
  EXPECT_THROW(compute_load_stats(bad, 1, 1, 3), Error);
}

TEST(LoadStats, FromCountsEqualsFromIds) {
  const std::vector<int32_t> ids = {0, 1, 0, 1, 0, 2, 0, 1};
  const std::vector<int64_t> counts = {4, 3, 1, 0};
  EXPECT_EQ(to_json(load_stats_from_counts(counts, 4, 2)), to_json(compute_load_stats(ids, 4, 2, 4)));
  // Counts that do not add up to n_tokens * top_k are a caller's mistake, not statistics.
  EXPECT_THROW(load_stats_from_counts(counts, 3, 2), Error);
  const std::vector<int64_t> negative = {9, -1};
  EXPECT_THROW(load_stats_from_counts(negative, 4, 2), Error);
}

}  // namespace
}  // namespace moe::routing
