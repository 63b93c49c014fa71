// moe layer --ep --backend cuda: one process per GPU; MPI starts the ranks, NCCL moves the rows.
#include "layer_ep.h"

#include "moe/dist/cuda_ep.h"

namespace moe::cli::detail {

void run_layer_ep_cuda(const MoeConfig& config, const MoeWeights& weights, const Tensor& x, const EpLayerArgs& args) {
  const std::unique_ptr<dist::Communicator> host = dist::make_mpi_communicator();
  const dist::Placement placement = dist::resolve_placement(args.placement, config.router.n_experts, host->size());
  dist::EpOutput out;
  {
    const std::unique_ptr<dist::DeviceCommunicator> comm = dist::make_nccl_communicator(*host);
    out = dist::run_cuda_ep_layer(*comm, config, weights, placement, args.wires, x);
  }  // NCCL is torn down before MPI
  if (host->rank() != 0) return;
  write_ep_outputs(out, placement, host->size(), args);
}

}  // namespace moe::cli::detail
