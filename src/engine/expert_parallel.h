#pragma once
// A model under expert parallelism: the ranks, the expert-parallel MoE blocks that the model runner takes
// through ModelOptions::moe_block, and every block's per-rank statistics.
//   ModelBackend::cpu   ep::make_ep_layer: the CPU reference experts, token rows over MPI
//   ModelBackend::cuda  ep::make_cuda_ep_layer: one GPU per rank, token rows over NCCL
// Each block runs through ep::forward_replicated: every rank its slice of the tokens, the slices' outputs
// gathered on every rank, so that a block's output is the same bytes on every rank and the ranks pick the
// same tokens.
// With EplbOptions::interval_steps > 0 the placement is elastic: every MoE block records its routing into a
// load window (ep/load_window.h); every interval_steps model steps the ranks sum the window, rebalance each
// layer (ep/rebalance.h), copy the expert weights they newly hold from the ranks holding them while the old
// blocks stay intact, agree to switch, and switch at that step: a new epoch.
//   cpu   the slots are host tensors moved over MPI (ep/expert_migration.h); the combine sends each pair's
//         row back, so the output stays bit-identical to one rank's whichever replica serves a pair
//   cuda  the slots stay on each rank's GPU in the grouped GEMMs' layout and move GPU to GPU over NCCL into
//         fresh device buffers (ep/device_expert_slots.h); the new epoch's layer is built on them without a
//         disk read or a host copy, and the old buffers go with the old layer. The wires are bf16 (or fp8),
//         so the output equals one GPU's within the GPU layer's tolerance, not bit for bit: with a bf16
//         combine max |a - b| / max |b| <= 1e-2 over tokens whose expert choices agree (one rounding of the
//         partial sums to bf16 more than one GPU), fp8 dispatch normwise <= 0.125; an epoch changes which
//         ranks add a token's partial sums, so outputs may move by that much across a switch

#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ep/communicator.h"
#include "ep/device_communicator.h"
#include "ep/device_expert_slots.h"
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
  // moe serve: the placement is elastic whatever interval_steps is (rebalances on demand, scaling), and a
  // due rebalance runs from the serving loop between steps (begin_epoch, then advance_migration once a
  // step: one layer's copies a step) rather than inside a step's last block.
  bool between_steps = false;
  bool elastic() const { return interval_steps > 0 || between_steps; }
};

// What begin_epoch decided.
struct EpochPlan {
  bool move = false;                   // a migration started (advance_migration switches to it)
  int moved_experts = 0;               // (rank, expert) slots the copies will fill, over the layers
  double predicted_max_over_mean = 1;  // the worst layer's predicted rank max/mean under the new placement
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
  // eplb: elastic placement (on the CPU it needs the f32 dispatch wire; throws moe::Error naming the option
  // otherwise).
  ExpertParallel(model::ModelBackend backend, std::string placement_file, ep::EpWires wires,
                 int64_t exchange_tokens, EplbOptions eplb = {});
  ~ExpertParallel();
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  int rank() const { return host_->rank(); }
  int size() const { return host_->size(); }
  // The ranks' transport (for the collectives of a composition above, e.g. the serving loop's broadcast).
  ep::Communicator& host() { return *host_; }
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

  // Elastic placement driven from outside the steps (EplbOptions::between_steps). Every rank calls these at
  // the same point between the same steps: they are collective and decide the same everywhere.
  const EplbOptions& eplb() const { return eplb_; }
  // The ranks holding experts: 0 .. active_ranks()-1 (all of them until a scaling switch).
  int active_ranks() const { return active_ranks_; }
  // The current epoch: 0 at start, +1 at every switch.
  int epoch() const { return static_cast<int>(epochs_.size()); }
  // Whether interval_steps steps have run since the last decision (between_steps: the loop starts it).
  bool rebalance_due() const { return due_; }
  bool migrating() const { return pending_.has_value(); }
  // Sums the load window and decides every layer for ranks 0 .. active_ranks-1 (1 to size()) with
  // `min_gain`; a change of active ranks moves whenever the placement improves (a window without load
  // counts every expert alike) and gives a joining rank its experts. Starts the migration when anything
  // moves. Throws moe::Error (on every rank alike) while a migration is under way, for active_ranks out of
  // range, or for a placement the policy or the coverage check refuses (nothing is copied then).
  EpochPlan begin_epoch(int active_ranks, double min_gain);
  // Copies the next moving layer's expert weights into staging slots (the old placement keeps serving);
  // once every layer is staged, agrees the switch and switches: true then, epochs().back() the new epoch.
  bool advance_migration();
  // Every MoE block's decoder layer index and current placement, in layer order.
  std::vector<std::pair<int64_t, ep::Placement>> layer_placements() const;
  // The load window summed over the ranks: [blocks][experts], in layer order (zeros before any step).
  std::vector<std::vector<int64_t>> window_load();

 private:
  // A block's current epoch: its layer, placement and this rank's slot weights (swapped at a switch).
  struct Live {
    MoeConfig config;
    MoeWeights weights;  // router and shared experts (views); experts: empty
    ep::Placement placement;
    std::vector<SwigluWeights> slots;   // cpu: this rank's, placement.rank_experts[rank] order
    ep::DeviceExpertSlots device_slots;  // cuda: the same on this rank's GPU (the layer's own, shared)
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
  void ensure_window();

  // A migration from its decision to its switch.
  struct Pending {
    EpochRecord record;
    std::chrono::steady_clock::time_point start;
    int active_ranks = 0;
    std::vector<std::pair<size_t, ep::Placement>> moves;  // (block, new placement) of the moving layers
    size_t next = 0;                                      // the next move to stage
    std::vector<std::pair<size_t, Live>> staged;
  };
  model::ModelBackend backend_;
  EplbOptions eplb_;
  std::unique_ptr<ep::LoadWindow> window_;
  int64_t steps_ = 0;
  std::vector<int64_t> served_mark_;  // [blocks][R] pairs served per rank up to the last decision
  std::vector<EpochRecord> epochs_;
  int active_ranks_ = 0;
  bool due_ = false;
  std::optional<Pending> pending_;
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
