#pragma once
// moe layer --ep: the block under expert parallelism over MPI (every rank runs this; rank 0 writes).

#include <string>

#include "ep/data_parallel.h"
#include "ep/placement.h"
#include "ep/transfer.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"

namespace moe::cli {

struct EpLayerArgs {
  std::string placement;  // placement JSON, or empty for contiguous
  ep::EpWires wires;    // resolve_ep_wires (ep_wires.h)
  std::string output;     // safetensors: hidden_states, topk_ids, topk_weights
  std::string stats;      // optional: load statistics + per-rank exchange statistics
  std::string backend = "cpu";  // cpu (MPI, reference experts) | cuda (one GPU per rank, NCCL)
};

void run_layer_ep(const MoeConfig& config, MoeWeights weights, const Tensor& x, const EpLayerArgs& args);

namespace detail {
// The run's placement (args.placement, else contiguous over n_ranks), its errors naming the option.
ep::Placement run_placement(const EpLayerArgs& args, int n_experts, int n_ranks);
// Rank 0's files (outputs, and statistics when asked) of an expert-parallel run.
void write_ep_outputs(const ep::EpOutput& out, const ep::Placement& placement, int n_ranks,
                      const EpLayerArgs& args);
// The GPU run (layer_ep_cuda.cpp, CUDA builds only).
void run_layer_ep_cuda(const MoeConfig& config, const MoeWeights& weights, const Tensor& x, const EpLayerArgs& args);
}  // namespace detail

}  // namespace moe::cli
