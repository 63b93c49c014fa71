#include "ep/placement.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "core/text_file.h"
#include "moe/core/check.h"

namespace moe::ep {

namespace {

void check_divisible(int n_experts, int n_ranks, const char* strategy) {
  MOE_CHECK(n_ranks >= 1, "expert parallelism over {} ranks: need at least one", n_ranks);
  MOE_CHECK(n_experts >= 1, "{} experts: need at least one", n_experts);
  MOE_CHECK(n_experts % n_ranks == 0,
            "{} experts do not divide over {} ranks for a {} placement: run on a rank count that divides {}, or "
            "give a placement file (e.g. a load-aware one with replicas)",
            n_experts, n_ranks, strategy, n_experts);
}

}  // namespace

void Placement::finish() {
  MOE_CHECK(n_experts >= 1 && n_ranks >= 1, "placement of {} experts on {} ranks: both must be at least 1", n_experts,
            n_ranks);
  MOE_CHECK(static_cast<int>(rank_experts.size()) == n_ranks, "placement lists {} ranks, but n_ranks is {}",
            rank_experts.size(), n_ranks);
  replica_rank.assign(n_experts, {});
  replica_slot.assign(n_experts, {});
  for (int r = 0; r < n_ranks; ++r) {
    const auto& slots = rank_experts[r];
    for (size_t s = 0; s < slots.size(); ++s) {
      const int e = slots[s];
      MOE_CHECK(e >= 0 && e < n_experts, "placement: rank {} slot {} holds expert {}, outside [0, {})", r, s, e,
                n_experts);
      MOE_CHECK(replica_rank[e].empty() || replica_rank[e].back() != r,
                "placement: rank {} holds expert {} twice (a replica must live on another rank)", r, e);
      replica_rank[e].push_back(r);
      replica_slot[e].push_back(static_cast<int32_t>(s));
    }
  }
  for (int e = 0; e < n_experts; ++e)
    MOE_CHECK(!replica_rank[e].empty(), "placement: expert {} is on no rank (every expert needs at least one slot)",
              e);
}

Placement make_placement(int n_experts, int n_ranks, std::vector<std::vector<int32_t>> rank_experts) {
  Placement p;
  p.n_experts = n_experts;
  p.n_ranks = n_ranks;
  p.rank_experts = std::move(rank_experts);
  p.finish();
  return p;
}

Placement contiguous_placement(int n_experts, int n_ranks) {
  check_divisible(n_experts, n_ranks, "contiguous");
  std::vector<std::vector<int32_t>> ranks;
  const int per_rank = n_experts / n_ranks;
  for (int r = 0; r < n_ranks; ++r) {
    ranks.emplace_back(per_rank);
    std::iota(ranks.back().begin(), ranks.back().end(), r * per_rank);
  }
  return make_placement(n_experts, n_ranks, std::move(ranks));
}

Placement round_robin_placement(int n_experts, int n_ranks) {
  check_divisible(n_experts, n_ranks, "round-robin");
  std::vector<std::vector<int32_t>> ranks(n_ranks);
  for (int e = 0; e < n_experts; ++e) ranks[e % n_ranks].push_back(e);
  return make_placement(n_experts, n_ranks, std::move(ranks));
}

Placement load_aware_placement(std::span<const int64_t> tokens_per_expert, int n_ranks, int slots_per_rank) {
  const int E = static_cast<int>(tokens_per_expert.size());
  MOE_CHECK(n_ranks >= 1 && E >= 1, "load-aware placement of {} experts on {} ranks: both must be at least 1", E,
            n_ranks);
  const int64_t slots = int64_t{n_ranks} * slots_per_rank;
  MOE_CHECK(slots_per_rank >= 1 && slots >= E,
            "{} ranks x {} slots = {} slots cannot hold {} experts: use at least {} slots per rank", n_ranks,
            slots_per_rank, slots, E, (E + n_ranks - 1) / n_ranks);
  MOE_CHECK(slots_per_rank <= E, "{} slots per rank exceed the {} experts (a rank holds each expert at most once)",
            slots_per_rank, E);
  for (int e = 0; e < E; ++e)
    MOE_CHECK(tokens_per_expert[e] >= 0, "load statistics: expert {} has a negative load {}", e, tokens_per_expert[e]);

  // Spare slots to the hottest experts by load per replica (at most one replica per rank).
  std::vector<int> replicas(E, 1);
  for (int64_t spare = slots - E; spare > 0; --spare) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (replicas[e] >= n_ranks) continue;
      // a/ra > b/rb without division: a*rb > b*ra.
      if (best < 0 || tokens_per_expert[e] * replicas[best] > tokens_per_expert[best] * replicas[e]) best = e;
    }
    ++replicas[best];  // slots_per_rank <= E guarantees a candidate
  }

  // Replicas largest-first (ties: lower expert), each onto the least-loaded rank with room and no copy yet.
  struct Item {
    int expert;
    double load;
  };
  std::vector<Item> items;
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < replicas[e]; ++i) items.push_back({e, static_cast<double>(tokens_per_expert[e]) / replicas[e]});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.load > b.load; });
  std::vector<std::vector<int32_t>> ranks(n_ranks);
  std::vector<double> load(n_ranks, 0.0);
  for (const Item& item : items) {
    int best = -1;
    for (int r = 0; r < n_ranks; ++r) {
      const auto& held = ranks[r];
      if (static_cast<int>(held.size()) >= slots_per_rank) continue;
      if (std::find(held.begin(), held.end(), item.expert) != held.end()) continue;
      // Ties go to the rank with more free slots, so that replicas packed later still find distinct ranks.
      if (best < 0 || load[r] < load[best] ||
          (load[r] == load[best] && held.size() < ranks[best].size()))
        best = r;
    }
    MOE_CHECK(best >= 0,
              "load-aware placement: no free slot for a replica of expert {} on a rank without it; give more slots "
              "per rank or fewer replicas",
              item.expert);
    ranks[best].push_back(item.expert);
    load[best] += item.load;
  }
  for (auto& held : ranks) std::sort(held.begin(), held.end());
  return make_placement(E, n_ranks, std::move(ranks));
}

std::vector<double> rank_loads(const Placement& placement, std::span<const int64_t> tokens_per_expert) {
  MOE_CHECK(static_cast<int>(tokens_per_expert.size()) == placement.n_experts,
            "load statistics for {} experts, placement for {}", tokens_per_expert.size(), placement.n_experts);
  std::vector<double> load(placement.n_ranks, 0.0);
  for (int e = 0; e < placement.n_experts; ++e)
    for (int32_t r : placement.replica_rank[e])
      load[r] += static_cast<double>(tokens_per_expert[e]) / placement.n_replicas(e);
  return load;
}

nlohmann::json to_json(const Placement& p) {
  return {{"n_experts", p.n_experts}, {"n_ranks", p.n_ranks}, {"ranks", p.rank_experts}};
}

Placement placement_from_json(const nlohmann::json& j) {
  MOE_CHECK(j.is_object() && j.contains("n_experts") && j.contains("n_ranks") && j.contains("ranks"),
            "a placement is a JSON object with n_experts, n_ranks and ranks (a list of expert lists, one per rank)");
  try {
    return make_placement(j.at("n_experts").get<int>(), j.at("n_ranks").get<int>(),
                          j.at("ranks").get<std::vector<std::vector<int32_t>>>());
  } catch (const nlohmann::json::exception& e) {
    MOE_FAIL("placement JSON: {} (n_experts and n_ranks are integers, ranks a list of integer lists)", e.what());
  }
}

void save_placement(const Placement& placement, const std::filesystem::path& path) {
  std::ofstream file(path);
  file << to_json(placement).dump() << "\n";
  MOE_CHECK(file.good(), "cannot write the placement file '{}'", path.string());
}

namespace {

nlohmann::json read_json(const std::filesystem::path& path, const char* what) {
  return read_json_file(path, fmt::format("{} file", what));
}

}  // namespace

Placement load_placement(const std::filesystem::path& path) {
  try {
    return placement_from_json(read_json(path, "placement"));
  } catch (const Error& e) {
    MOE_FAIL("{} (in '{}')", e.what(), path.string());
  }
}

std::vector<int64_t> load_tokens_per_expert(const std::filesystem::path& stats_json) {
  const nlohmann::json j = read_json(stats_json, "load statistics");
  MOE_CHECK(j.is_object() && j.contains("tokens_per_expert") && j["tokens_per_expert"].is_array(),
            "load statistics '{}' have no tokens_per_expert list (routing::to_json of a layer's LoadStats has one)",
            stats_json.string());
  try {
    return j["tokens_per_expert"].get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    MOE_FAIL("load statistics '{}': tokens_per_expert must be integers ({})", stats_json.string(), e.what());
  }
}

void check_placement(const Placement& placement, int n_experts, int n_ranks) {
  MOE_CHECK(placement.n_experts == n_experts, "placement for {} experts, the model has {}", placement.n_experts,
            n_experts);
  MOE_CHECK(placement.n_ranks == n_ranks, "placement for {} ranks, but {} are running (mpirun -np {})",
            placement.n_ranks, n_ranks, placement.n_ranks);
}

Placement resolve_placement(const std::filesystem::path& file, int n_experts, int n_ranks) {
  if (file.empty()) return contiguous_placement(n_experts, n_ranks);
  Placement p = load_placement(file);
  MOE_CHECK(p.n_experts == n_experts, "placement '{}' is for {} experts, the model has {}", file.string(), p.n_experts,
            n_experts);
  MOE_CHECK(p.n_ranks == n_ranks, "placement '{}' is for {} ranks, but {} are running (mpirun -np {})", file.string(),
            p.n_ranks, n_ranks, p.n_ranks);
  return p;
}

}  // namespace moe::ep
