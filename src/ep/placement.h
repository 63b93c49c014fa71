#pragma once
// Expert placement: which logical experts each rank holds (its physical slots). An expert may live on
// several ranks (replicas of hot experts); a token's pair (t, e) goes to replica t mod n_replicas(e), so
// that load spreads deterministically. Saved and loaded as JSON:
//   {"n_experts": 8, "n_ranks": 2, "ranks": [[0, 1, 2, 3, 7], [4, 5, 6, 7]]}

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace moe::ep {

struct Placement {
  int n_experts = 0;
  int n_ranks = 0;
  std::vector<std::vector<int32_t>> rank_experts;  // [n_ranks][slots of that rank]: logical expert of each slot

  // Derived by finish(): for each expert, the ranks holding it (ascending) and its slot there.
  std::vector<std::vector<int32_t>> replica_rank;  // [n_experts][n_replicas]
  std::vector<std::vector<int32_t>> replica_slot;  // [n_experts][n_replicas]

  // Checks the map (every expert placed at least once, ids in range, no expert twice on one rank) and
  // fills the replica tables. Throws moe::Error naming the problem.
  void finish();
  int n_replicas(int expert) const { return static_cast<int>(replica_rank[expert].size()); }
  // The replica that serves pair (token, expert): index token mod n_replicas(expert).
  int replica_for(int64_t token, int expert) const {
    return static_cast<int>(token % static_cast<int64_t>(replica_rank[expert].size()));
  }
};

// A checked placement (finish() applied) from each rank's list of experts.
Placement make_placement(int n_experts, int n_ranks, std::vector<std::vector<int32_t>> rank_experts);

// E / R consecutive experts per rank; E must divide by R (the error names both and the fixes).
Placement contiguous_placement(int n_experts, int n_ranks);
// Expert e on rank e mod R; E must divide by R, as for contiguous.
Placement round_robin_placement(int n_experts, int n_ranks);
// Load-aware: R * slots_per_rank slots; every expert gets one, the spare slots go one at a time to the expert
// with the largest load per replica (ties to the lower id, at most one replica per rank), then replicas are
// packed largest-first onto the rank with the smallest load that has a free slot and no copy of that expert.
//   tokens_per_expert [n_experts]: the load statistics (routing::LoadStats::tokens_per_expert).
Placement load_aware_placement(std::span<const int64_t> tokens_per_expert, int n_ranks, int slots_per_rank);

// Per-rank load under a placement: pairs each rank would serve, replicas splitting their expert's load.
std::vector<double> rank_loads(const Placement& placement, std::span<const int64_t> tokens_per_expert);

nlohmann::json to_json(const Placement& placement);
Placement placement_from_json(const nlohmann::json& j);
void save_placement(const Placement& placement, const std::filesystem::path& path);
Placement load_placement(const std::filesystem::path& path);
// tokens_per_expert of a load-statistics JSON file (routing::to_json of a LoadStats).
std::vector<int64_t> load_tokens_per_expert(const std::filesystem::path& stats_json);

// Throws moe::Error unless `placement` is for n_experts experts on n_ranks ranks (the running ones).
void check_placement(const Placement& placement, int n_experts, int n_ranks);

// A placement for a run: the file when given (checked against E and R), else contiguous.
Placement resolve_placement(const std::filesystem::path& file, int n_experts, int n_ranks);

}  // namespace moe::ep
