// The rebalancing policy on Zipf-skewed routing (s = 1.2, E = 128, k = 8, 4 ranks, 8 redundant slots per
// layer): rank max/mean load of the contiguous placement, and after one rebalance on the window it was
// decided from and on a fresh window of the same distribution (the load a placement meets next). Target:
// max/mean <= 1.10 after one rebalance. Pure maths, no ranks: `bench_eplb [tokens] [seed]`.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "ep/rebalance.h"

namespace {

constexpr int kExperts = 128, kTopK = 8, kRanks = 4, kRedundant = 8;
constexpr double kZipf = 1.2;

// Pairs per expert of `tokens` tokens, each picking k distinct experts with Zipf weights (the popularity
// ranks shuffled over the expert ids, so that the hot experts are not the first ones).
std::vector<int64_t> zipf_window(int64_t tokens, const std::vector<int>& rank_of, std::mt19937_64& rng) {
  std::vector<double> weight(kExperts);
  for (int e = 0; e < kExperts; ++e) weight[e] = 1.0 / std::pow(rank_of[e] + 1.0, kZipf);
  std::vector<int64_t> load(kExperts, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> w = weight;
    for (int j = 0; j < kTopK; ++j) {
      const int e = std::discrete_distribution<int>(w.begin(), w.end())(rng);
      ++load[e];
      w[e] = 0;  // without replacement
    }
  }
  return load;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 16384;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  std::mt19937_64 rng(seed);
  std::vector<int> rank_of(kExperts);
  std::iota(rank_of.begin(), rank_of.end(), 0);
  std::shuffle(rank_of.begin(), rank_of.end(), rng);
  const std::vector<int64_t> window = zipf_window(tokens, rank_of, rng);
  const std::vector<int64_t> next = zipf_window(tokens, rank_of, rng);

  const moe::ep::Placement current = moe::ep::contiguous_placement(kExperts, kRanks);
  const auto start = std::chrono::steady_clock::now();
  const moe::ep::RebalanceDecision d = moe::ep::rebalance_layer(
      window, current, {.n_ranks = kRanks, .redundant_slots = kRedundant, .min_gain = 0.05});
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();

  fmt::print("zipf s={} E={} k={} ranks={} redundant={} tokens={} seed={}\n", kZipf, kExperts, kTopK, kRanks,
             kRedundant, tokens, seed);
  fmt::print("max/mean before (contiguous)      {:.3f}\n", d.max_over_mean_before);
  fmt::print("max/mean after, decision window   {:.3f}\n", d.max_over_mean_after);
  fmt::print("max/mean after, next window       {:.3f}  (target <= 1.10)\n",
             moe::ep::max_over_mean(d.placement, next, kRanks));
  fmt::print("moved experts {}, decision {:.0f} us\n", d.moved_experts, us);
  // The next decision, on the next window of the same distribution: the default min_gain keeps the placement
  // still where a decision without it would move many experts for a gain within the noise.
  const moe::ep::RebalanceOptions keep{.n_ranks = kRanks, .redundant_slots = kRedundant, .min_gain = 0.05};
  const moe::ep::RebalanceDecision again = moe::ep::rebalance_layer(next, d.placement, keep);
  moe::ep::RebalanceOptions any_gain = keep;
  any_gain.min_gain = 0;
  const moe::ep::RebalanceDecision eager = moe::ep::rebalance_layer(next, d.placement, any_gain);
  fmt::print("next window: {} at min_gain 0.05; at 0, {} experts would move for max/mean {:.3f} -> {:.3f}\n",
             again.move ? "move" : "no move", eager.moved_experts, eager.max_over_mean_before,
             eager.max_over_mean_after);
  return 0;
}
