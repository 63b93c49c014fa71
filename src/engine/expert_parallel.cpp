#include "engine/expert_parallel.h"

#include <fmt/core.h>

#include "moe/core/check.h"
#include "ep/data_parallel.h"
#include "ep/ep_layer.h"
#include "ep/placement.h"

namespace moe::engine {

namespace {

// "0-7" for a run of consecutive ids, else "0,3,5".
std::string id_runs(const std::vector<int32_t>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!text.empty()) text += ",";
    text += j > i + 1 ? fmt::format("{}-{}", ids[i], ids[j])
                      : j == i + 1 ? fmt::format("{},{}", ids[i], ids[j]) : fmt::format("{}", ids[i]);
    i = j + 1;
  }
  return text;
}

std::string bytes_text(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (int64_t{1} << 20)) return fmt::format("{:.1f} KiB", double(bytes) / 1024);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
  return fmt::format("{:.2f} GiB", double(bytes) / (1 << 30));
}

nlohmann::ordered_json rank_json(int rank, const ep::ExchangeStats& s) {
  return {{"rank", rank},
          {"tokens", s.tokens},
          {"copies_sent", s.copies_sent},
          {"copies_received", s.copies_received},
          {"pairs_served", s.pairs_served},
          {"bytes_sent", s.bytes_sent},
          {"bytes_received", s.bytes_received}};
}

// Every rank's totals over all the layers.
std::vector<ep::ExchangeStats> over_layers(const std::vector<EpLayerStats>& stats, int n_ranks) {
  std::vector<ep::ExchangeStats> totals(n_ranks);
  for (const EpLayerStats& layer : stats)
    for (int r = 0; r < n_ranks; ++r) totals[r] += layer.ranks[r];
  return totals;
}

}  // namespace

ExpertParallel::ExpertParallel(model::ModelBackend backend, std::string placement_file, ep::EpWires wires,
                               int64_t exchange_tokens)
    : backend_(backend),
      placement_file_(std::move(placement_file)),
      wires_(wires),
      exchange_tokens_(exchange_tokens) {
  const bool gpus = backend_ == model::ModelBackend::cuda;
  MOE_CHECK(!gpus || wires_.dispatch != ep::Transfer::f32,
            "expert parallelism on GPUs sends bf16 rows (the GPU layer's input is bf16): choose a bf16 or fp8 "
            "dispatch wire");
  host_ = ep::make_mpi_communicator();
  if (gpus) device_ = ep::make_nccl_communicator(*host_);
}

ExpertParallel::~ExpertParallel() = default;

void ExpertParallel::install(model::ModelOptions& options) {
  options.moe_block = [this](int64_t layer, const MoeConfig& config, MoeWeights weights) {
    ep::Placement placement = ep::resolve_placement(placement_file_, config.router.n_experts, size());
    if (!placement_) placement_ = placement;
    std::shared_ptr<ep::EpLayer> block;
    if (device_) {
      block = std::make_shared<ep::EpLayer>(ep::make_cuda_ep_layer(*device_, config, weights, std::move(placement),
                                                                   wires_, exchange_tokens_));
    } else {
      block = std::make_shared<ep::EpLayer>(
          ep::make_ep_layer(*host_, config, std::move(weights), std::move(placement), wires_.dispatch));
    }
    auto totals = std::make_shared<ep::ExchangeStats>();
    blocks_.push_back({layer, totals});
    return model::ModelOptions::MoeBlockFn(
        [block, totals](const Tensor& x) { return ep::forward_replicated(*block, x, totals.get()); });
  };
}

std::vector<EpLayerStats> ExpertParallel::gather_stats() {
  std::vector<EpLayerStats> stats;
  for (const Block& block : blocks_) stats.push_back({block.layer, ep::gather_stats(*host_, *block.totals)});
  return stats;
}

nlohmann::ordered_json ExpertParallel::stats_json(const std::vector<EpLayerStats>& stats) const {
  nlohmann::ordered_json j;
  j["ranks"] = size();
  j["backend"] = backend_ == model::ModelBackend::cuda ? "cuda" : "cpu";
  j["transfer"] = ep::transfer_name(wires_.dispatch);
  j["combine"] = ep::transfer_name(wires_.combine);
  j["experts"] = placement_ ? nlohmann::ordered_json(placement_->rank_experts) : nlohmann::ordered_json::array();
  j["layers"] = nlohmann::ordered_json::object();
  for (const EpLayerStats& layer : stats) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (int r = 0; r < size(); ++r) ranks.push_back(rank_json(r, layer.ranks[r]));
    j["layers"][std::to_string(layer.layer)] = ranks;
  }
  nlohmann::ordered_json totals = nlohmann::ordered_json::array();
  const std::vector<ep::ExchangeStats> all = over_layers(stats, size());
  for (int r = 0; r < size(); ++r) totals.push_back(rank_json(r, all[r]));
  j["per_rank"] = totals;
  return j;
}

std::vector<std::string> ExpertParallel::summary(const std::vector<EpLayerStats>& stats) const {
  const std::vector<ep::ExchangeStats> all = over_layers(stats, size());
  int64_t pairs = 0;
  for (const ep::ExchangeStats& s : all) pairs += s.pairs_served;
  std::vector<std::string> lines;
  for (int r = 0; r < size(); ++r) {
    const ep::ExchangeStats& s = all[r];
    lines.push_back(fmt::format("rank {} (experts {}): {} pairs ({:.1f}%), sent {}, received {}", r,
                                placement_ ? id_runs(placement_->rank_experts[r]) : "none", s.pairs_served,
                                pairs > 0 ? 100.0 * double(s.pairs_served) / double(pairs) : 0.0,
                                bytes_text(s.bytes_sent), bytes_text(s.bytes_received)));
  }
  return lines;
}

}  // namespace moe::engine
