#include "engine/expert_parallel.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>

#include "ep/data_parallel.h"
#include "ep/ep_layer.h"
#include "ep/expert_migration.h"
#include "ep/placement.h"
#include "ep/rebalance.h"
#include "moe/core/check.h"

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
                               int64_t exchange_tokens, EplbOptions eplb)
    : backend_(backend),
      eplb_(eplb),
      placement_file_(std::move(placement_file)),
      wires_(wires),
      exchange_tokens_(exchange_tokens) {
  const bool gpus = backend_ == model::ModelBackend::cuda;
  MOE_CHECK(!gpus || wires_.dispatch != ep::Transfer::f32,
            "expert parallelism on GPUs sends bf16 rows (the GPU layer's input is bf16): choose a bf16 or fp8 "
            "dispatch wire");
  MOE_CHECK(
      eplb_.interval_steps >= 0 && eplb_.window_steps >= 1 && eplb_.redundant_experts >= 0 &&
          eplb_.min_gain >= 0,
      "--eplb-interval-steps {} and --num-redundant-experts {} must be at least 0, --eplb-window-steps {} at "
      "least 1, --eplb-min-gain {} at least 0",
      eplb_.interval_steps, eplb_.redundant_experts, eplb_.window_steps, eplb_.min_gain);
  // NOTE: on GPUs the wires are bf16 or fp8 (checked above) and the outputs within their tolerance of one
  // GPU's; on the CPU elastic placement promises bit-identical outputs, which the f32 wire alone keeps.
  MOE_CHECK(!eplb_.elastic() || gpus || wires_.dispatch == ep::Transfer::f32,
            "--eplb-interval-steps keeps outputs bit-identical to one rank with the f32 dispatch wire: drop "
            "--ep-transfer");
  host_ = ep::make_mpi_communicator();
  active_ranks_ = host_->size();
  if (gpus) device_ = ep::make_nccl_communicator(*host_);
}

ExpertParallel::~ExpertParallel() = default;

void ExpertParallel::install(model::ModelOptions& options) {
  options.moe_block = [this](int64_t layer, const MoeConfig& config, MoeWeights weights) {
    const int E = config.router.n_experts;
    // Elastic without a file: experts that do not divide over the ranks start evenly spread (the first
    // ranks one more), since the rebalancing gives every rank its share of slots anyway.
    ep::Placement placement =
        eplb_.elastic() && placement_file_.empty() && E % size() != 0
            ? ep::load_aware_placement(std::vector<int64_t>(E, 1), size(), (E + size() - 1) / size())
            : ep::resolve_placement(placement_file_, E, size());
    if (!placement_) placement_ = placement;
    auto totals = std::make_shared<ep::ExchangeStats>();
    if (eplb_.elastic()) {
      MOE_CHECK(int64_t{eplb_.redundant_experts} <= int64_t{E} * (size() - 1),
                "--num-redundant-experts {}: {} experts on {} ranks have room for at most {} replicas (a "
                "rank holds "
                "an expert once); give fewer or run on more ranks",
                eplb_.redundant_experts, E, size(), int64_t{E} * (size() - 1));
      // Elastic: the block keeps its epoch's placement and slot weights, and the layer is rebuilt at a
      // switch.
      auto live = std::make_shared<Live>();
      live->config = config;
      live->placement = std::move(placement);
      if (device_) {
        // The first epoch's layer uploads this rank's experts; its device slots are the ones that migrate.
        live->layer = std::make_shared<ep::EpLayer>(
            ep::make_cuda_ep_layer(*device_, config, weights, live->placement, wires_, exchange_tokens_));
        live->device_slots = live->layer->device_slots;
      } else {
        for (int32_t e : live->placement.rank_experts[rank()]) live->slots.push_back(weights.experts[e]);
      }
      weights.experts.assign(weights.experts.size(), SwigluWeights{});
      live->weights = std::move(weights);
      if (!device_) live->layer = build_layer(*live);
      const size_t index = blocks_.size();
      blocks_.push_back({layer, totals, live});
      return model::ModelOptions::MoeBlockFn([this, live, totals, index](const Tensor& x) {
        const std::shared_ptr<ep::EpLayer> current = live->layer;  // this step's epoch, kept for the call
        LayerOutput out = ep::forward_replicated(*current, x, totals.get());
        after_block(index, out);
        return out;
      });
    }
    std::shared_ptr<ep::EpLayer> block;
    if (device_) {
      block = std::make_shared<ep::EpLayer>(ep::make_cuda_ep_layer(*device_, config, weights, std::move(placement),
                                                                   wires_, exchange_tokens_));
    } else {
      block = std::make_shared<ep::EpLayer>(
          ep::make_ep_layer(*host_, config, std::move(weights), std::move(placement), wires_.dispatch));
    }
    blocks_.push_back({layer, totals, nullptr});
    return model::ModelOptions::MoeBlockFn(
        [block, totals](const Tensor& x) { return ep::forward_replicated(*block, x, totals.get()); });
  };
}

std::shared_ptr<ep::EpLayer> ExpertParallel::build_layer(const Live& live) {
  if (device_)
    return std::make_shared<ep::EpLayer>(ep::make_cuda_ep_layer(*device_, live.config, live.weights, live.placement,
                                                                live.device_slots, wires_, exchange_tokens_));
  MoeWeights weights = live.weights;
  for (size_t s = 0; s < live.slots.size(); ++s)
    weights.experts[live.placement.rank_experts[rank()][s]] = live.slots[s];
  return std::make_shared<ep::EpLayer>(ep::make_ep_layer(
      *host_, live.config, std::move(weights), live.placement, ep::Transfer::f32, ep::CombineMode::per_pair));
}

void ExpertParallel::ensure_window() {
  if (!window_)
    window_ = std::make_unique<ep::LoadWindow>(static_cast<int>(blocks_.size()),
                                               blocks_[0].live->config.router.n_experts, eplb_.window_steps);
}

void ExpertParallel::after_block(size_t block, const LayerOutput& out) {
  const int n_blocks = static_cast<int>(blocks_.size());
  ensure_window();
  // This rank's tokens only (every rank holds the whole batch's ids); the collective sums the ranks.
  const int64_t k = out.topk.ids.size(1);
  const ep::TokenRange mine = ep::token_range(out.topk.ids.size(0), rank(), size());
  const int32_t* ids = out.topk.ids.data_as<int32_t>();
  window_->record(static_cast<int>(block),
                  {ids + mine.begin * k, static_cast<size_t>((mine.end - mine.begin) * k)});
  if (static_cast<int>(block) != n_blocks - 1) return;
  window_->end_step();
  if (eplb_.interval_steps == 0 || ++steps_ % eplb_.interval_steps != 0) return;
  if (eplb_.between_steps)
    due_ = true;
  else
    rebalance();
}

void ExpertParallel::rebalance() {
  if (!begin_epoch(active_ranks_, eplb_.min_gain).move) return;
  while (!advance_migration()) {
  }
}

std::vector<std::vector<int64_t>> ExpertParallel::window_load() {
  ensure_window();
  return window_->summed(*host_);
}

std::vector<std::pair<int64_t, ep::Placement>> ExpertParallel::layer_placements() const {
  std::vector<std::pair<int64_t, ep::Placement>> out;
  for (const Block& block : blocks_) out.emplace_back(block.layer, block.live->placement);
  return out;
}

EpochPlan ExpertParallel::begin_epoch(int active_ranks, double min_gain) {
  MOE_CHECK(!pending_, "a migration to epoch {} is under way: wait for its switch", epochs_.size() + 1);
  MOE_CHECK(active_ranks >= 1 && active_ranks <= size(), "{} active ranks: give 1 to {} (the ranks launched)",
            active_ranks, size());
  due_ = false;
  Pending pending;
  pending.record.epoch = static_cast<int>(epochs_.size()) + 1;
  pending.record.step = steps_;
  pending.start = std::chrono::steady_clock::now();
  pending.active_ranks = active_ranks;
  const std::vector<std::vector<int64_t>> load = window_load();
  // Pairs each rank served per block since the last decision: the interval just ended.
  const size_t R = static_cast<size_t>(size());
  std::vector<int64_t> served(blocks_.size() * R, 0);  // [blocks][R]
  for (size_t i = 0; i < blocks_.size(); ++i) served[i * R + rank()] = blocks_[i].totals->pairs_served;
  host_->allreduce_sum(served);
  served_mark_.resize(served.size(), 0);
  auto interval = [&](size_t i) {
    std::vector<int64_t> v(R);
    for (size_t r = 0; r < R; ++r) v[r] = served[i * R + r] - served_mark_[i * R + r];
    return v;
  };
  auto block_of = [&](int64_t layer) {
    size_t i = 0;
    while (blocks_[i].layer != layer) ++i;
    return i;
  };
  // Every rank decides the same from the same sums; nothing is recorded until every layer's decision
  // passes (a refusal leaves the state as it was).
  const bool scaling = active_ranks != active_ranks_;
  EpochPlan plan;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Live& live = *blocks_[i].live;
    std::vector<int64_t> layer_load = load[i];
    const bool idle = std::all_of(layer_load.begin(), layer_load.end(), [](int64_t l) { return l == 0; });
    if (scaling && idle) layer_load.assign(layer_load.size(), 1);
    const int E = live.config.router.n_experts;
    const ep::RebalanceDecision d = ep::rebalance_layer(
        layer_load, live.placement,
        {.n_ranks = size(),
         .active_ranks = active_ranks,
         // NOTE: fewer active ranks have room for fewer replicas (one per rank): the spare slots shrink.
         .redundant_slots = static_cast<int>(std::min<int64_t>(eplb_.redundant_experts, int64_t{E} * (active_ranks - 1))),
         .min_gain = scaling ? 0.0 : min_gain});
    plan.predicted_max_over_mean = std::max(plan.predicted_max_over_mean, d.max_over_mean_after);
    try {
      ep::check_active_coverage(d.placement, active_ranks);
    } catch (const Error& e) {
      MOE_FAIL("layer {}: {}: refused, nothing moved", blocks_[i].layer, e.what());
    }
    if (!d.move) continue;
    plan.moved_experts += d.moved_experts;
    pending.record.moved_experts += d.moved_experts;
    pending.record.layers.push_back({.layer = blocks_[i].layer,
                                     .before = ep::rank_loads(live.placement, load[i]),
                                     .after = ep::rank_loads(d.placement, load[i]),
                                     .served_before = interval(i),
                                     .served_after = {}});
    pending.moves.emplace_back(i, d.placement);
  }
  if (!epochs_.empty())
    for (EpochRecord::Layer& l : epochs_.back().layers)
      if (l.served_after.empty()) l.served_after = interval(block_of(l.layer));
  served_mark_ = std::move(served);
  plan.move = !pending.moves.empty() || scaling;
  if (plan.move) pending_ = std::move(pending);
  return plan;
}

bool ExpertParallel::advance_migration() {
  MOE_CHECK(pending_, "advance_migration without a migration under way: begin_epoch starts one");
  Pending& p = *pending_;
  if (p.next < p.moves.size()) {
    // One layer's copies into staging slots; the layer that serves keeps its own weights until the switch.
    const auto& [i, to] = p.moves[p.next++];
    const Live& live = *blocks_[i].live;
    Live next = live;
    next.placement = to;
    int64_t bytes[1] = {0};
    if (device_) {
      // Device to device into fresh slot buffers, on the legacy stream (after any forward enqueued there).
      const ep::DeviceExpertSlots& current = live.device_slots;
      ep::DeviceMigration m = ep::migrate_device_experts(*device_, live.placement, to, current,
                                                         current.w13.size(2), current.w2.size(2), nullptr);
      bytes[0] = m.bytes_sent;
      next.device_slots = std::move(m.slots);
    } else {
      const ep::ExpertShape shape{.hidden = live.config.hidden_size,
                                  .intermediate = live.config.expert_intermediate_size,
                                  .dtype = live.slots.empty() ? DType::F32 : live.slots[0].gate.dtype()};
      ep::Migration m = ep::migrate_experts(*host_, live.placement, to, live.slots, shape);
      bytes[0] = m.bytes_sent;
      next.slots = std::move(m.slots);
    }
    host_->allreduce_sum(bytes);
    p.record.bytes_moved += bytes[0];
    p.staged.emplace_back(i, std::move(next));
    if (p.next < p.moves.size()) return false;
  }
  // NOTE: a switch by some ranks only would route with tables the others lack: all switch here or none.
  // Every rank has staged its copies when it gets here (they are synchronous, one layer a call); the
  // agreement is the one point where ranks commit to the new epoch.
  MOE_CHECK(ep::agree_switch(*host_, true), "the ranks did not agree to switch to epoch {}", p.record.epoch);
  for (auto& [i, next] : p.staged) {
    next.layer = build_layer(next);
    *blocks_[i].live = std::move(next);  // the old layer and the weights only it held are freed here
  }
  placement_ = blocks_[0].live->placement;
  active_ranks_ = p.active_ranks;
  p.record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
  epochs_.push_back(std::move(p.record));
  pending_.reset();
  return true;
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
  if (eplb_.elastic()) {
    j["epochs"] = nlohmann::ordered_json::array();
    for (const EpochRecord& e : epochs_) {
      nlohmann::ordered_json layers = nlohmann::ordered_json::object();
      for (const EpochRecord::Layer& l : e.layers) {
        nlohmann::ordered_json& j_layer = layers[std::to_string(l.layer)];
        j_layer = {{"before", l.before}, {"after", l.after}, {"served_before", l.served_before}};
        if (!l.served_after.empty()) j_layer["served_after"] = l.served_after;
      }
      j["epochs"].push_back({{"epoch", e.epoch},
                             {"step", e.step},
                             {"moved_experts", e.moved_experts},
                             {"bytes_moved", e.bytes_moved},
                             {"seconds", e.seconds},
                             {"layers", layers}});
    }
  }
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
