#pragma once
// The rebalancing policy of elastic expert parallelism, as pure maths (no ranks talk here): from one
// layer's load per logical expert over a recent window, a new placement with replicas of the hot experts,
// its predicted rank load, and whether moving is worth it.
//   1. replicas: every expert one slot; the redundant slots go one at a time to the expert with the
//      largest load per replica (ties to the lower id; at most one replica per active rank)
//   2. packing, largest replica load first (ties to the lower expert): onto the host with the smallest
//      load that has a free slot and fewer copies of the expert than ranks, then within each host onto
//      its rank with the smallest load, a free slot and no copy yet (hosts first balances the traffic
//      between hosts; one host is the flat case)
//   3. the new ranks are relabelled (within a host, and hosts among themselves) to keep as many of the
//      current (rank, expert) pairs as possible, so that fewer weights move; on one host with the same
//      slot count, the current placement refined by single moves and swaps between its most and least
//      loaded ranks wins instead when it balances within min_gain / 2 of the fresh packing with fewer moves
//      (drift is then followed with a few copies, not a reshuffle)
//   4. "no move" when the predicted max/mean rank load improves on the current placement's by less than
//      min_gain (an absolute difference of the two ratios)
// Ranks 0 .. active_ranks-1 take experts; the ranks beyond hold none (they stay idle in the world).

#include <cstdint>
#include <span>
#include <vector>

#include "ep/placement.h"

namespace moe::ep {

struct RebalanceOptions {
  int n_ranks = 1;          // ranks in the world (the placement's n_ranks)
  int active_ranks = 0;     // ranks that hold experts, 0 .. active_ranks-1; 0: all n_ranks
  int ranks_per_host = 0;   // ranks of one host (must divide active_ranks); 0: all on one host
  int redundant_slots = 0;  // spare slots per layer beyond one per expert
  double min_gain = 0.05;   // the least improvement of predicted max/mean rank load worth a move
};

struct RebalanceDecision {
  Placement placement;              // the new placement, or the current one when !move
  bool move = false;                // whether the gain reaches min_gain (and the placement differs)
  int moved_experts = 0;            // (rank, expert) pairs the new placement holds that the current does not
  double max_over_mean_before = 0;  // predicted max/mean rank load of the current placement under `load`
  double max_over_mean_after = 0;   // the same for the new placement (== before when !move)
};

// One layer. load [n_experts]: pairs per logical expert (non-negative; all zero moves nothing). current:
// the running placement (n_ranks ranks, the same experts). Throws moe::Error for options that cannot hold
// every expert on the active ranks, or a current placement of other sizes.
RebalanceDecision rebalance_layer(std::span<const int64_t> load, const Placement& current,
                                  const RebalanceOptions& options);

// Every expert held by at least one of ranks 0 .. active_ranks-1: throws moe::Error naming the first
// expert that is not (a placement that leaves one unheld is refused).
void check_active_coverage(const Placement& placement, int active_ranks);

// max / mean of rank_loads over the active ranks (1 = even; 1 when there is no load).
double max_over_mean(const Placement& placement, std::span<const int64_t> load, int active_ranks);

}  // namespace moe::ep
