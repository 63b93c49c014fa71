#pragma once
// A model under expert parallelism: the ranks, the expert-parallel MoE blocks that the model runner takes
// through ModelOptions::moe_block, and every block's per-rank statistics.
//   ModelBackend::cpu   ep::make_ep_layer: the CPU reference experts, token rows over MPI
//   ModelBackend::cuda  ep::make_cuda_ep_layer: one GPU per rank, token rows over NCCL
// Each block runs through ep::forward_replicated: every rank its slice of the tokens, the slices' outputs
// gathered on every rank, so that a block's output is the same bytes on every rank and the ranks pick the
// same tokens.

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ep/communicator.h"
#include "ep/device_communicator.h"
#include "ep/dispatch_combine.h"
#include "ep/ep_layer.h"
#include "moe/model/causal_lm.h"

namespace moe::engine {

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
  ExpertParallel(model::ModelBackend backend, std::string placement_file, ep::EpWires wires,
                 int64_t exchange_tokens);
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
  // "rank 0 (experts 0-7): 412 pairs (51.5%), sent 98.0 KiB, received 91.3 KiB" per rank, over every layer.
  std::vector<std::string> summary(const std::vector<EpLayerStats>& stats) const;

 private:
  struct Block {
    int64_t layer;
    std::shared_ptr<ep::ExchangeStats> totals;  // this rank's, over the forwards so far
  };
  model::ModelBackend backend_;
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
