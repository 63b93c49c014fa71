// Placement maths: the strategies, their validation and JSON round trip (no MPI).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "moe/core/check.h"
#include "ep/placement.h"
#include "test_random.h"

namespace moe::ep {
namespace {

using nlohmann::json;

// Runs fn and checks that it throws moe::Error whose message holds every keyword.
template <class Fn>
void expect_error(Fn fn, std::vector<std::string> keywords) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& k : keywords) EXPECT_NE(std::string(e.what()).find(k), std::string::npos) << e.what();
  }
}

TEST(Placement, ContiguousAndRoundRobin) {
  const Placement c = contiguous_placement(8, 4);
  EXPECT_EQ(c.rank_experts, (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(c.replica_rank[5], std::vector<int32_t>{2});
  EXPECT_EQ(c.replica_slot[5], std::vector<int32_t>{1});
  const Placement rr = round_robin_placement(8, 4);
  EXPECT_EQ(rr.rank_experts, (std::vector<std::vector<int32_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(Placement, NotDivisibleNamesNumbersAndFix) {
  expect_error([] { contiguous_placement(6, 4); }, {"6 experts", "4 ranks", "placement file"});
  expect_error([] { round_robin_placement(5, 2); }, {"5 experts", "2 ranks"});
}

TEST(Placement, ValidationRejectsBadMaps) {
  const auto make = [](int E, int R, std::vector<std::vector<int32_t>> ranks) { make_placement(E, R, ranks); };
  expect_error([&] { make(4, 2, {{0, 1}, {2}}); }, {"expert 3", "no rank"});
  expect_error([&] { make(4, 2, {{0, 1, 1}, {2, 3}}); }, {"rank 0", "expert 1 twice"});
  expect_error([&] { make(4, 2, {{0, 9}, {2, 3}}); }, {"expert 9"});
  expect_error([&] { make(4, 3, {{0, 1}, {2, 3}}); }, {"2 ranks", "n_ranks is 3"});
}

TEST(Placement, ReplicaChoiceSpreadsTokens) {
  const Placement p = make_placement(2, 3, {{0, 1}, {0}, {0}});
  EXPECT_EQ(p.replica_rank[0], (std::vector<int32_t>{0, 1, 2}));
  std::vector<int> hits(3, 0);
  for (int64_t t = 0; t < 30; ++t) ++hits[p.replica_rank[0][p.replica_for(t, 0)]];
  EXPECT_EQ(hits, (std::vector<int>{10, 10, 10}));
  EXPECT_EQ(p.replica_for(7, 1), 0);
}

TEST(Placement, LoadAwareReplicatesHottestAndBalances) {
  // Expert 0 is hot: with 2 spare slots it gets both, and the ranks end up even.
  const std::vector<int64_t> load = {600, 100, 100, 100, 100, 100};
  const Placement p = load_aware_placement(load, 4, 2);
  EXPECT_EQ(p.n_replicas(0), 3);
  for (int e = 1; e < 6; ++e) EXPECT_EQ(p.n_replicas(e), 1);
  for (const auto& r : p.rank_experts) EXPECT_LE(r.size(), 2u);
  const std::vector<double> per_rank = rank_loads(p, load);
  const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
  EXPECT_DOUBLE_EQ(*hi, 300.0);  // 1100 pairs over 4 ranks: 200 + 100 on every rank but one
  EXPECT_GE(*lo, 200.0);
}

// NOTE: greedy packing under a slot limit has no tight optimality bound, so random loads check the
// invariants: valid map, slots respected, spare slots filled, a hotter expert never has fewer replicas.
TEST(Placement, LoadAwareRandomLoadsKeepInvariants) {
  test::TestRng rng;
  for (int trial = 0; trial < 50; ++trial) {
    const int R = static_cast<int>(rng.uniform_int(1, 6));
    const int E = R * static_cast<int>(rng.uniform_int(1, 6));
    const int slots = std::min(E, E / R + static_cast<int>(rng.uniform_int(0, 2)));
    std::vector<int64_t> load(E);
    for (auto& l : load) l = rng.uniform_int(0, 1000);
    const Placement p = load_aware_placement(load, R, slots);  // finish() validated the map
    size_t used = 0;
    for (const auto& r : p.rank_experts) {
      EXPECT_LE(static_cast<int>(r.size()), slots);
      used += r.size();
    }
    EXPECT_EQ(used, static_cast<size_t>(R) * slots) << "R " << R << " E " << E << " slots " << slots;
    for (int a = 0; a < E; ++a)
      for (int b = 0; b < E; ++b)
        if (load[a] > load[b]) {
          EXPECT_GE(p.n_replicas(a), p.n_replicas(b)) << a << " vs " << b;
        }
  }
}

TEST(Placement, LoadAwareRejectsTooFewSlots) {
  const std::vector<int64_t> load(10, 1);
  expect_error([&] { load_aware_placement(load, 3, 3); }, {"9 slots", "10 experts", "4 slots per rank"});
}

TEST(Placement, JsonRoundTripAndFiles) {
  const Placement p = load_aware_placement(std::vector<int64_t>{5, 1, 9, 3, 0, 2}, 2, 4);
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "moe_placement_test.json";
  save_placement(p, path);
  const Placement q = load_placement(path);
  EXPECT_EQ(q.rank_experts, p.rank_experts);
  EXPECT_EQ(q.replica_rank, p.replica_rank);
  EXPECT_EQ(resolve_placement(path, 6, 2).rank_experts, p.rank_experts);
  expect_error([&] { resolve_placement(path, 6, 3); }, {"2 ranks", "3 are running"});
  expect_error([&] { resolve_placement(path, 8, 2); }, {"6 experts", "has 8"});
  expect_error([] { placement_from_json(json{{"n_experts", 2}}); }, {"n_ranks"});
  std::filesystem::remove(path);
}

TEST(Placement, StatsFileTokensPerExpert) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "moe_stats_test.json";
  std::ofstream(path) << R"({"n_tokens": 4, "tokens_per_expert": [3, 0, 5]})";
  EXPECT_EQ(load_tokens_per_expert(path), (std::vector<int64_t>{3, 0, 5}));
  std::ofstream(path) << R"({"n_tokens": 4})";
  expect_error([&] { load_tokens_per_expert(path); }, {"tokens_per_expert", "LoadStats"});
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moe::ep
