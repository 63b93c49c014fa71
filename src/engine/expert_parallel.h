#pragma once
// A model under expert parallelism: the ranks, the expert-parallel MoE blocks that the model runner takes
// through ModelOptions::moe_block, and every block's per-rank statistics.
//   ModelBackend::cpu   ep::make_ep_layer: the CPU reference experts, token rows over MPI
//   ModelBackend::cuda  ep::make_cuda_ep_layer: one GPU per rank, token rows over NCCL
// Each block runs through ep::forward_replicated: every rank its slice of the tokens, the slices' outputs
// gathered on every rank, so that a block's output is the same bytes on every rank and the ranks pick the
// same tokens.
// With EplbOptions::interval_steps > 0 (CPU backend) the placement is elastic: every MoE block records its
// routing into a load window (ep/load_window.h); every interval_steps model steps the ranks sum the window,
// rebalance each layer (ep/rebalance.h), copy the expert weights they newly hold from the ranks holding
// them (ep/expert_migration.h) while the old blocks stay intact, agree to switch, and switch at that step:
// a new epoch. The combine then sends each pair's row back, so the output stays bit-identical to one rank's
// whichever replica serves a pair.

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ep/communicator.h"
#include "ep/device_communicator.h"
#include "ep/dispatch_combine.h"
#include "ep/ep_layer.h"
#include "ep/load_window.h"
#include "moe/model/causal_lm.h"

namespace moe::engine {

// Elastic placement (moe generate --ep --eplb-interval-steps): all off by default.
struct EplbOptions {
  int interval_steps = 0;     // rebalance every this many model steps; 0: the placement stays fixed
  int window_steps = 1000;    // the load window: routing of the last this many steps
  int redundant_experts = 0;  // spare slots per layer for replicas of hot experts
  double min_gain = 0.05;     // move only when predicted max/mean rank load improves by at least this
};

// One switch to a new placement: when, what moved, and each moved layer's per-rank load under the window
// that decided it, before and after.
struct EpochRecord {
  int epoch = 0;
  int64_t step = 0;         // the model step after which the ranks switched
  int moved_experts = 0;    // (rank, expert) slots filled by a copy, over the layers
  int64_t bytes_moved = 0;  // expert weight bytes sent between ranks, over all ranks
  double seconds = 0;       // from the decision to the switch (rank 0's clock)
  struct Layer {
    int64_t layer = 0;                  // decoder layer index
    std::vector<double> before, after;  // [R] predicted pairs per rank
    // [R] pairs each rank served in the interval before the switch, and in the one after it (filled at
    // the next decision; empty until then).
    std::vector<int64_t> served_before, served_after;
  };
  std::vector<Layer> layers;
};

// One MoE block's exchange statistics per rank, summed over the run's forwards.
struct EpLayerStats {
  int64_t layer = 0;                       // decoder layer index
  std::vector<ep::ExchangeStats> ranks;  // [R]
};

class ExpertParallel {
 public:
  // Starts MPI (and NCCL for the CUDA backend). Collective. Throws moe::Error where the backend cannot run:
  // a build without MPI, CUDA or NCCL, a rank without a GPU of its own, an f32 dispatch wire on GPUs.
  // placement_file: a placement JSON, or empty for contiguous. exchange_tokens: the most tokens one rank
  // sends through a GPU block's exchange at once (EngineOptions: ep_exchange_tokens).
  // eplb: elastic placement (CPU backend only; throws moe::Error naming the option otherwise).
  ExpertParallel(model::ModelBackend backend, std::string placement_file, ep::EpWires wires,
                 int64_t exchange_tokens, EplbOptions eplb = {});
  ~ExpertParallel();
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  int rank() const { return host_->rank(); }
  int size() const { return host_->size(); }
  // Sets options.moe_block; the blocks it makes hold references to this object's communicators, so the
  // model must be destroyed first.
  void install(model::ModelOptions& options);

  // Every block's per-rank totals, in layer order, on every rank. Collective.
  std::vector<EpLayerStats> gather_stats();
  // {"ranks", "backend", "transfer", "combine", "experts": [per rank], "layers": {"N": [per rank {"rank", "tokens",
  // "copies_sent", "copies_received", "pairs_served", "bytes_sent", "bytes_received"}]}, "per_rank": totals
  // over the layers}.
  nlohmann::ordered_json stats_json(const std::vector<EpLayerStats>& stats) const;
  // The epochs so far (the same on every rank).
  const std::vector<EpochRecord>& epochs() const { return epochs_; }
  // "rank 0 (experts 0-7): 412 pairs (51.5%), sent 98.0 KiB, received 91.3 KiB" per rank, over every layer.
  std::vector<std::string> summary(const std::vector<EpLayerStats>& stats) const;

 private:
  // A block's current epoch: its layer, placement and this rank's slot weights (swapped at a switch).
  struct Live {
    MoeConfig config;
    MoeWeights weights;  // router and shared experts (views); experts: empty
    ep::Placement placement;
    std::vector<SwigluWeights> slots;  // this rank's, placement.rank_experts[rank] order
    std::shared_ptr<ep::EpLayer> layer;
  };
  struct Block {
    int64_t layer;
    std::shared_ptr<ep::ExchangeStats> totals;  // this rank's, over the forwards so far
    std::shared_ptr<Live> live;                 // elastic blocks only
  };
  // After each MoE block's forward: records the routing; after the last block of a step, closes the step
  // and rebalances when due. Collective (every rank runs the same steps).
  void after_block(size_t block, const LayerOutput& out);
  void rebalance();
  std::shared_ptr<ep::EpLayer> build_layer(const Live& live);

  model::ModelBackend backend_;
  EplbOptions eplb_;
  std::unique_ptr<ep::LoadWindow> window_;
  int64_t steps_ = 0;
  std::vector<int64_t> served_mark_;  // [blocks][R] pairs served per rank up to the last decision
  std::vector<EpochRecord> epochs_;
  std::string placement_file_;
  ep::EpWires wires_;
  int64_t exchange_tokens_;
  // NOTE: declared in teardown order reversed: the blocks go first, then NCCL, then MPI.
  std::unique_ptr<ep::Communicator> host_;
  std::unique_ptr<ep::DeviceCommunicator> device_;
  std::optional<ep::Placement> placement_;  // the first block's (every MoE block has the same experts)
  std::vector<Block> blocks_;
};

}  // namespace moe::engine
