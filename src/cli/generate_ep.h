#pragma once
// `moe generate --ep`: the ranks, the expert-parallel MoE blocks that the model runner takes through
// ModelOptions::moe_block, and every block's per-rank statistics (--stats, and the summary printed).
//   --backend cpu   ep::make_ep_layer: the CPU reference experts, token rows over MPI
//   --backend cuda  ep::make_cuda_ep_layer: one GPU per rank, token rows over NCCL
// Each block runs through ep::forward_replicated: every rank its slice of the tokens, the slices' outputs
// gathered on every rank, so that a block's output is the same bytes on every rank and the ranks pick the
// same tokens.

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moe/ep/communicator.h"
#include "moe/ep/device_communicator.h"
#include "moe/ep/dispatch_combine.h"
#include "moe/ep/ep_layer.h"
#include "moe/model/causal_lm.h"

namespace moe::cli {

// One MoE block's exchange statistics per rank, summed over the run's forwards.
struct EpLayerStats {
  int64_t layer = 0;                       // decoder layer index
  std::vector<ep::ExchangeStats> ranks;  // [R]
};

class GenerateEp {
 public:
  // Starts MPI (and NCCL for backend "cuda"). Collective. Throws moe::Error where the backend cannot run:
  // a build without MPI, CUDA or NCCL, a rank without a GPU of its own.
  // wires: resolve_ep_wires (ep_wires.h).
  GenerateEp(const std::string& backend, std::string placement_file, ep::EpWires wires, int64_t max_batched_tokens);
  ~GenerateEp();
  GenerateEp(const GenerateEp&) = delete;
  GenerateEp& operator=(const GenerateEp&) = delete;

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
  std::string backend_, placement_file_;
  ep::EpWires wires_;
  int64_t max_batched_tokens_;
  // NOTE: declared in teardown order reversed: the blocks go first, then NCCL, then MPI.
  std::unique_ptr<ep::Communicator> host_;
  std::unique_ptr<ep::DeviceCommunicator> device_;
  std::optional<ep::Placement> placement_;  // the first block's (every MoE block has the same experts)
  std::vector<Block> blocks_;
};

}  // namespace moe::cli
