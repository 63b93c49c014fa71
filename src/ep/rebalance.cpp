#include "ep/rebalance.h"

#include <algorithm>
#include <numeric>

#include "moe/core/check.h"

namespace moe::ep {

namespace {

struct Replica {
  int expert;
  double load;  // the expert's load per replica
};

// Replica counts: one each, then the spare slots to the largest load per replica (a/ra > b/rb as a*rb >
// b*ra).
std::vector<int> replica_counts(std::span<const int64_t> load, int spare, int max_replicas) {
  const int E = static_cast<int>(load.size());
  std::vector<int> replicas(E, 1);
  for (; spare > 0; --spare) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (replicas[e] >= max_replicas) continue;
      if (best < 0 || load[e] * replicas[best] > load[best] * replicas[e]) best = e;
    }
    ++replicas[best];  // spare <= E * (max_replicas - 1) guarantees a candidate
  }
  return replicas;
}

// Among bins with room that admit the replica, the one with the smallest load; ties to a bin that holds
// the expert now (fewer moves), then to more free slots (so that replicas packed later still find distinct
// bins), then to the lower index. -1 when none admits it.
template <class Admits, class Holds>
int least_loaded(const std::vector<double>& load, const std::vector<int>& used, int capacity, Admits admits,
                 Holds holds) {
  int best = -1;
  for (int b = 0; b < static_cast<int>(load.size()); ++b) {
    if (used[b] >= capacity || !admits(b)) continue;
    if (best < 0 || load[b] < load[best]) {
      best = b;
    } else if (load[b] == load[best]) {
      const bool b_holds = holds(b), best_holds = holds(best);
      if ((b_holds && !best_holds) || (b_holds == best_holds && used[b] < used[best])) best = b;
    }
  }
  return best;
}

bool holds(const Placement& placement, int rank, int expert) {
  const auto& held = placement.rank_experts[rank];
  return std::find(held.begin(), held.end(), expert) != held.end();
}

// Greedy matching of new groups to old labels by overlap (largest first): label_of[new] = old.
std::vector<int> match_labels(const std::vector<std::vector<int>>& overlap) {
  const int n = static_cast<int>(overlap.size());
  struct Pair {
    int overlap, fresh, old;
  };
  std::vector<Pair> pairs;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) pairs.push_back({overlap[a][b], a, b});
  std::stable_sort(pairs.begin(), pairs.end(),
                   [](const Pair& x, const Pair& y) { return x.overlap > y.overlap; });
  std::vector<int> label_of(n, -1);
  std::vector<bool> taken(n, false);
  for (const Pair& p : pairs) {
    if (label_of[p.fresh] >= 0 || taken[p.old]) continue;
    label_of[p.fresh] = p.old;
    taken[p.old] = true;
  }
  return label_of;
}

int overlap_of(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int n = 0;
  for (int32_t e : a) n += std::find(b.begin(), b.end(), e) != b.end();
  return n;
}

// The packed ranks [A][experts], relabelled to keep the current pairs: hosts among themselves, then the
// ranks within each host.
std::vector<std::vector<int32_t>> relabel(std::vector<std::vector<int32_t>> packed, const Placement& current,
                                          int rph) {
  const int A = static_cast<int>(packed.size()), H = A / rph;
  auto host_experts = [&](const std::vector<std::vector<int32_t>>& ranks, int h) {
    std::vector<int32_t> all;
    for (int r = h * rph; r < (h + 1) * rph; ++r)
      if (r < static_cast<int>(ranks.size())) all.insert(all.end(), ranks[r].begin(), ranks[r].end());
    return all;
  };
  std::vector<std::vector<int>> host_overlap(H, std::vector<int>(H));
  for (int a = 0; a < H; ++a)
    for (int b = 0; b < H; ++b)
      host_overlap[a][b] = overlap_of(host_experts(packed, a), host_experts(current.rank_experts, b));
  const std::vector<int> host_label = match_labels(host_overlap);
  std::vector<std::vector<int32_t>> out(A);
  for (int a = 0; a < H; ++a) {
    const int b = host_label[a];
    std::vector<std::vector<int>> rank_overlap(rph, std::vector<int>(rph));
    for (int i = 0; i < rph; ++i)
      for (int j = 0; j < rph; ++j)
        rank_overlap[i][j] = overlap_of(packed[a * rph + i], current.rank_experts[b * rph + j]);
    const std::vector<int> rank_label = match_labels(rank_overlap);
    for (int i = 0; i < rph; ++i) out[b * rph + rank_label[i]] = std::move(packed[a * rph + i]);
  }
  return out;
}

// The first expert that no rank below active_ranks holds; -1 when every one is held.
int first_unheld(const Placement& placement, int active_ranks) {
  for (int e = 0; e < placement.n_experts; ++e) {
    const auto& ranks = placement.replica_rank[e];
    if (std::none_of(ranks.begin(), ranks.end(), [&](int32_t r) { return r < active_ranks; })) return e;
  }
  return -1;
}

// The incremental candidate: the current placement improved by moving or swapping single replicas between
// its most and its least loaded rank while that lowers the larger of the two (replica counts unchanged).
std::vector<std::vector<int32_t>> refine(const Placement& current, std::span<const int64_t> load, int A,
                                         int capacity) {
  std::vector<std::vector<int32_t>> ranks(current.rank_experts.begin(), current.rank_experts.begin() + A);
  auto share = [&](int32_t e) { return static_cast<double>(load[e]) / current.n_replicas(e); };
  std::vector<double> rank_load(A, 0.0);
  for (int r = 0; r < A; ++r)
    for (int32_t e : ranks[r]) rank_load[r] += share(e);
  auto has = [&](int r, int32_t e) {
    return std::find(ranks[r].begin(), ranks[r].end(), e) != ranks[r].end();
  };
  for (int step = 0; step < 4 * current.n_experts; ++step) {
    const int hi = static_cast<int>(std::max_element(rank_load.begin(), rank_load.end()) - rank_load.begin());
    const int lo = static_cast<int>(std::min_element(rank_load.begin(), rank_load.end()) - rank_load.begin());
    double best = rank_load[hi];
    int take = -1, give = -1;  // index in ranks[hi] moving to lo; index in ranks[lo] moving back (-1: none)
    for (size_t i = 0; i < ranks[hi].size(); ++i) {
      const int32_t x = ranks[hi][i];
      if (has(lo, x)) continue;
      if (static_cast<int>(ranks[lo].size()) < capacity) {
        const double peak = std::max(rank_load[hi] - share(x), rank_load[lo] + share(x));
        if (peak < best - 1e-9) best = peak, take = static_cast<int>(i), give = -1;
      }
      for (size_t j = 0; j < ranks[lo].size(); ++j) {
        const int32_t y = ranks[lo][j];
        if (has(hi, y)) continue;
        const double d = share(x) - share(y);
        const double peak = std::max(rank_load[hi] - d, rank_load[lo] + d);
        if (peak < best - 1e-9) best = peak, take = static_cast<int>(i), give = static_cast<int>(j);
      }
    }
    if (take < 0) break;
    const int32_t x = ranks[hi][take];
    rank_load[hi] -= share(x), rank_load[lo] += share(x);
    ranks[hi].erase(ranks[hi].begin() + take);
    if (give >= 0) {
      const int32_t y = ranks[lo][give];
      rank_load[lo] -= share(y), rank_load[hi] += share(y);
      ranks[lo].erase(ranks[lo].begin() + give);
      ranks[hi].push_back(y);
    }
    ranks[lo].push_back(x);
  }
  return ranks;
}

int moved_between(const Placement& from, const Placement& to) {
  int moved = 0;
  for (int r = 0; r < to.n_ranks; ++r)
    moved +=
        static_cast<int>(to.rank_experts[r].size()) - overlap_of(to.rank_experts[r], from.rank_experts[r]);
  return moved;
}

}  // namespace

void check_active_coverage(const Placement& placement, int active_ranks) {
  const int e = first_unheld(placement, active_ranks);
  MOE_CHECK(e < 0,
            "placement: expert {} is held by no active rank (ranks 0-{}); every expert needs a slot on an "
            "active rank",
            e, active_ranks - 1);
}

double max_over_mean(const Placement& placement, std::span<const int64_t> load, int active_ranks) {
  const std::vector<double> loads = rank_loads(placement, load);
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
  if (total <= 0) return 1.0;
  return *std::max_element(loads.begin(), loads.end()) / (total / active_ranks);
}

RebalanceDecision rebalance_layer(std::span<const int64_t> load, const Placement& current,
                                  const RebalanceOptions& options) {
  const int E = static_cast<int>(load.size()), R = options.n_ranks;
  const int A = options.active_ranks == 0 ? R : options.active_ranks;
  const int rph = options.ranks_per_host == 0 ? A : options.ranks_per_host;
  MOE_CHECK(R >= 1 && A >= 1 && A <= R, "rebalance: {} active ranks of {}: need 1 to {}", A, R, R);
  MOE_CHECK(rph >= 1 && A % rph == 0, "rebalance: {} ranks per host do not divide the {} active ranks", rph,
            A);
  MOE_CHECK(current.n_experts == E && current.n_ranks == R,
            "rebalance: the current placement is for {} experts on {} ranks, the load for {} experts on {}",
            current.n_experts, current.n_ranks, E, R);
  const int N = options.redundant_slots;
  MOE_CHECK(
      N >= 0 && int64_t{N} <= int64_t{E} * (A - 1),
      "rebalance: {} redundant slots for {} experts on {} active ranks: use 0 to {} (a rank holds an expert "
      "at most once)",
      N, E, A, int64_t{E} * (A - 1));
  MOE_CHECK(options.min_gain >= 0, "rebalance: min_gain {} must be at least 0", options.min_gain);
  for (int e = 0; e < E; ++e)
    MOE_CHECK(load[e] >= 0, "rebalance: expert {} has a negative load {}", e, load[e]);

  // 1. Replicas, as items largest load first.
  const std::vector<int> replicas = replica_counts(load, N, A);
  std::vector<Replica> items;
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < replicas[e]; ++i) items.push_back({e, static_cast<double>(load[e]) / replicas[e]});
  std::stable_sort(items.begin(), items.end(),
                   [](const Replica& a, const Replica& b) { return a.load > b.load; });

  // 2. Hosts first, then ranks within each host.
  const int H = A / rph, slots = E + N;
  const int rank_capacity = (slots + A - 1) / A;
  std::vector<double> host_load(H, 0.0), rank_load(A, 0.0);
  std::vector<int> host_used(H, 0), rank_used(A, 0);
  std::vector<std::vector<int>> host_copies(H, std::vector<int>(E, 0));
  std::vector<std::vector<Replica>> host_items(H);
  for (const Replica& item : items) {
    const int h = least_loaded(
        host_load, host_used, rph * rank_capacity, [&](int b) { return host_copies[b][item.expert] < rph; },
        [&](int b) {
          for (int r = b * rph; r < (b + 1) * rph; ++r)
            if (holds(current, r, item.expert)) return true;
          return false;
        });
    MOE_CHECK(h >= 0, "rebalance: no host has room for a replica of expert {}; give fewer redundant slots",
              item.expert);
    host_load[h] += item.load;
    ++host_used[h];
    ++host_copies[h][item.expert];
    host_items[h].push_back(item);
  }
  std::vector<std::vector<int32_t>> packed(A);
  for (int h = 0; h < H; ++h) {
    std::vector<double> load_in(rank_load.begin() + h * rph, rank_load.begin() + (h + 1) * rph);
    std::vector<int> used_in(rph, 0);
    for (const Replica& item : host_items[h]) {
      const int i = least_loaded(
          load_in, used_in, rank_capacity,
          [&](int b) {
            const auto& held = packed[h * rph + b];
            return std::find(held.begin(), held.end(), item.expert) == held.end();
          },
          [&](int b) { return holds(current, h * rph + b, item.expert); });
      MOE_CHECK(i >= 0,
                "rebalance: no rank of host {} has a free slot without expert {}; give fewer redundant slots",
                h, item.expert);
      load_in[i] += item.load;
      ++used_in[i];
      packed[h * rph + i].push_back(item.expert);
    }
  }

  // 3. Keep what can stay, then the full placement (ranks beyond the active ones hold nothing).
  std::vector<std::vector<int32_t>> ranks = relabel(std::move(packed), current, rph);
  for (auto& held : ranks) std::sort(held.begin(), held.end());
  ranks.resize(R);
  RebalanceDecision d{.placement = make_placement(E, R, std::move(ranks))};
  check_active_coverage(d.placement, A);
  d.moved_experts = moved_between(current, d.placement);
  d.max_over_mean_before = max_over_mean(current, load, A);
  d.max_over_mean_after = max_over_mean(d.placement, load, A);
  bool fits = first_unheld(current, A) < 0;
  for (int r = A; r < R; ++r) fits = fits && current.rank_experts[r].empty();

  // 3b. One host, the same slots: the current placement refined by single moves and swaps moves far fewer
  // experts; it wins when its predicted max/mean is within min_gain / 2 of the fresh packing's.
  int current_slots = 0, widest = rank_capacity;
  for (const auto& held : current.rank_experts) {
    current_slots += static_cast<int>(held.size());
    widest = std::max(widest, static_cast<int>(held.size()));
  }
  if (fits && H == 1 && current_slots == slots) {
    std::vector<std::vector<int32_t>> refined = refine(current, load, A, widest);
    for (auto& held : refined) std::sort(held.begin(), held.end());
    refined.resize(R);
    Placement incremental = make_placement(E, R, std::move(refined));
    const double ratio = max_over_mean(incremental, load, A);
    const int moved = moved_between(current, incremental);
    if (ratio <= d.max_over_mean_after + options.min_gain / 2 && moved < d.moved_experts) {
      d.placement = std::move(incremental);
      d.moved_experts = moved;
      d.max_over_mean_after = ratio;
    }
  }

  // 4. Move only for a gain, or when the current placement does not fit the active ranks.
  const bool gain = d.max_over_mean_before - d.max_over_mean_after >= options.min_gain;
  d.move = d.moved_experts > 0 && (gain || !fits);
  if (!d.move) {
    d.placement = current;
    d.moved_experts = 0;
    d.max_over_mean_after = d.max_over_mean_before;
  }
  return d;
}

}  // namespace moe::ep
