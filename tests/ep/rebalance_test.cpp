// The rebalancing policy: replicas to the hottest experts, largest-first packing (flat and by host), the
// relabelling that keeps weights in place, "no move" below the gain threshold, active-rank coverage.
#include "ep/rebalance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "error_of.h"
#include "test_random.h"

namespace moe::ep {
namespace {

int replicas_of(const Placement& p, int e) {
  return p.n_replicas(e);
}

TEST(Rebalance, SpareSlotsGoToLargestLoadPerReplica) {
  // Expert 0 takes 100 of 170 pairs; with two ranks it can have two replicas, then expert 1 (ties: lower id).
  const std::vector<int64_t> load = {100, 10, 10, 10, 10, 10, 10, 10};
  const RebalanceDecision d =
      rebalance_layer(load, contiguous_placement(8, 2), {.n_ranks = 2, .redundant_slots = 2, .min_gain = 0});
  ASSERT_TRUE(d.move);
  EXPECT_EQ(replicas_of(d.placement, 0), 2);
  EXPECT_EQ(replicas_of(d.placement, 1), 2);
  for (int e = 2; e < 8; ++e) EXPECT_EQ(replicas_of(d.placement, e), 1) << e;
  EXPECT_EQ(d.placement.rank_experts[0].size() + d.placement.rank_experts[1].size(), 10u);
  // Contiguous: rank 0 serves 130 of 170; after: 50 + 5 + three 10s = 85 each way, or close.
  EXPECT_NEAR(d.max_over_mean_before, 130.0 / 85.0, 1e-12);
  EXPECT_LT(d.max_over_mean_after, 1.1);
  EXPECT_EQ(d.max_over_mean_after, max_over_mean(d.placement, load, 2));
}

TEST(Rebalance, EvenLoadMovesNothing) {
  const Placement current = contiguous_placement(16, 4);
  const RebalanceDecision d = rebalance_layer(std::vector<int64_t>(16, 7), current, {.n_ranks = 4});
  EXPECT_FALSE(d.move);
  EXPECT_EQ(d.moved_experts, 0);
  EXPECT_EQ(d.placement.rank_experts, current.rank_experts);
  EXPECT_DOUBLE_EQ(d.max_over_mean_before, 1.0);
  EXPECT_DOUBLE_EQ(d.max_over_mean_after, 1.0);
}

TEST(Rebalance, GainBelowThresholdMovesNothing) {
  std::vector<int64_t> load(16, 100);
  for (int e = 0; e < 4; ++e) load[e] = 140;  // contiguous: rank 0 at 560 of 1760 (max/mean 1.27); best 1.0
  const Placement current = contiguous_placement(16, 4);
  const RebalanceDecision small = rebalance_layer(load, current, {.n_ranks = 4, .min_gain = 0.3});
  EXPECT_FALSE(small.move);
  EXPECT_EQ(small.placement.rank_experts, current.rank_experts);
  EXPECT_NEAR(small.max_over_mean_after, 560.0 / 440.0, 1e-12);
  const RebalanceDecision worth = rebalance_layer(load, current, {.n_ranks = 4, .min_gain = 0.2});
  EXPECT_TRUE(worth.move);
  EXPECT_DOUBLE_EQ(worth.max_over_mean_after, 1.0);
}

TEST(Rebalance, RebalancingItsOwnResultMovesNothing) {
  test::TestRng rng;
  std::vector<int64_t> load(32);
  for (auto& l : load) l = static_cast<int64_t>(rng.uniform_int(0, 1000));
  const RebalanceOptions options{.n_ranks = 4, .redundant_slots = 4, .min_gain = 0};
  const RebalanceDecision first = rebalance_layer(load, contiguous_placement(32, 4), options);
  const RebalanceDecision again = rebalance_layer(load, first.placement, options);
  EXPECT_FALSE(again.move);
  EXPECT_EQ(again.moved_experts, 0);
}

TEST(Rebalance, RelabellingKeepsExpertsWhereTheyAre) {
  // The current placement is already a balanced one with the ranks in another order: nothing needs to move.
  const std::vector<int64_t> load = {8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const RebalanceOptions options{.n_ranks = 4, .redundant_slots = 0, .min_gain = 0};
  const RebalanceDecision best = rebalance_layer(load, contiguous_placement(16, 4), options);
  std::vector<std::vector<int32_t>> rotated = best.placement.rank_experts;
  std::rotate(rotated.begin(), rotated.begin() + 1, rotated.end());
  const RebalanceDecision d = rebalance_layer(load, make_placement(16, 4, rotated), options);
  EXPECT_FALSE(d.move);
  EXPECT_EQ(d.placement.rank_experts, rotated);
}

TEST(Rebalance, HostsBalancedFirst) {
  // 2 hosts of 2 ranks; the four hot experts must not all land on one host.
  std::vector<int64_t> load(16, 1);
  for (int e = 0; e < 4; ++e) load[e] = 50;
  const RebalanceDecision d =
      rebalance_layer(load, contiguous_placement(16, 4), {.n_ranks = 4, .ranks_per_host = 2, .min_gain = 0});
  ASSERT_TRUE(d.move);
  const std::vector<double> rank = rank_loads(d.placement, load);
  EXPECT_DOUBLE_EQ(rank[0] + rank[1], rank[2] + rank[3]);
  EXPECT_LE(d.max_over_mean_after, 1.05);
}

// Pairs per expert of `tokens` tokens, each picking k distinct experts with Zipf s = 1.2 weights.
std::vector<int64_t> zipf_load(int E, int k, int tokens, std::mt19937_64& rng) {
  std::vector<double> weight(E);
  for (int e = 0; e < E; ++e) weight[e] = 1.0 / std::pow(e + 1.0, 1.2);
  std::vector<int64_t> load(E, 0);
  for (int t = 0; t < tokens; ++t) {
    std::vector<double> w = weight;
    for (int j = 0; j < k; ++j) {
      const int e = std::discrete_distribution<int>(w.begin(), w.end())(rng);
      ++load[e];
      w[e] = 0;
    }
  }
  return load;
}

TEST(Rebalance, ZipfSkewWithRedundantSlotsReachesTarget) {
  // 64 experts, top-4 without replacement, 4 ranks, 4 spare slots.
  std::mt19937_64 rng(7);
  const std::vector<int64_t> load = zipf_load(64, 4, 4000, rng);
  const RebalanceDecision d =
      rebalance_layer(load, contiguous_placement(64, 4), {.n_ranks = 4, .redundant_slots = 4});
  ASSERT_TRUE(d.move);
  EXPECT_GT(d.max_over_mean_before, 1.5);
  EXPECT_LE(d.max_over_mean_after, 1.10);
}

TEST(Rebalance, DriftIsFollowedWithFewMoves) {
  // The next window of the same distribution: the incremental candidate (single moves and swaps from the
  // current placement) reaches the fresh packing's balance with a handful of the 68 slots changed.
  std::mt19937_64 rng(11);
  const RebalanceOptions options{.n_ranks = 4, .redundant_slots = 4, .min_gain = 0};
  const RebalanceDecision first =
      rebalance_layer(zipf_load(64, 4, 4000, rng), contiguous_placement(64, 4), options);
  const std::vector<int64_t> next = zipf_load(64, 4, 4000, rng);
  const RebalanceDecision again = rebalance_layer(next, first.placement, options);
  EXPECT_GT(again.moved_experts, 0);
  EXPECT_LE(again.moved_experts, 16);
  EXPECT_LE(again.max_over_mean_after, 1.02);
  EXPECT_LE(again.max_over_mean_after, again.max_over_mean_before);
}

TEST(Rebalance, ScalingDownEmptiesTheLeavingRanks) {
  const std::vector<int64_t> load(8, 3);  // even: only the scale forces the move
  const RebalanceDecision d =
      rebalance_layer(load, contiguous_placement(8, 4), {.n_ranks = 4, .active_ranks = 2});
  ASSERT_TRUE(d.move);
  EXPECT_TRUE(d.placement.rank_experts[2].empty());
  EXPECT_TRUE(d.placement.rank_experts[3].empty());
  check_active_coverage(d.placement, 2);
  // The leaving ranks' four experts move at least; moved_experts counts the pairs the old placement lacks.
  const Placement old = contiguous_placement(8, 4);
  int fresh = 0;
  for (int r = 0; r < 2; ++r)
    for (int32_t e : d.placement.rank_experts[r])
      fresh += std::count(old.rank_experts[r].begin(), old.rank_experts[r].end(), e) == 0;
  EXPECT_GE(d.moved_experts, 4);
  EXPECT_EQ(d.moved_experts, fresh);
  EXPECT_DOUBLE_EQ(d.max_over_mean_after, 1.0);
}

TEST(Rebalance, RefusesAnUnheldExpertAndImpossibleOptions) {
  const Placement p = make_placement(4, 3, {{0, 1}, {2}, {3}});
  check_active_coverage(p, 3);
  EXPECT_NE(test::error_of([&] { check_active_coverage(p, 2); }).find("expert 3 is held by no active rank"),
            std::string::npos);
  const std::vector<int64_t> load(4, 1);
  EXPECT_NE(test::error_of([&] {
              rebalance_layer(load, p, {.n_ranks = 3, .redundant_slots = 9});
            }).find("9 redundant slots"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              rebalance_layer(load, p, {.n_ranks = 3, .ranks_per_host = 2});
            }).find("2 ranks per host"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              rebalance_layer(load, contiguous_placement(4, 2), {.n_ranks = 3});
            }).find("current placement"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              rebalance_layer(std::vector<int64_t>{1, -1, 1, 1}, p, {.n_ranks = 3});
            }).find("negative load"),
            std::string::npos);
}

}  // namespace
}  // namespace moe::ep
