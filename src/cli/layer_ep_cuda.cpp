// moe layer --ep --backend cuda: one process per GPU; MPI starts the ranks, NCCL moves the rows.
#include "layer_ep.h"

#include "moe/ep/cuda_ep.h"

namespace moe::cli::detail {

void run_layer_ep_cuda(const MoeConfig& config, const MoeWeights& weights, const Tensor& x, const EpLayerArgs& args) {
  const std::unique_ptr<ep::Communicator> host = ep::make_mpi_communicator();
  const ep::Placement placement = run_placement(args, config.router.n_experts, host->size());
  ep::EpOutput out;
  {
    const std::unique_ptr<ep::DeviceCommunicator> comm = ep::make_nccl_communicator(*host);
    out = ep::run_cuda_ep_layer(*comm, config, weights, placement, args.wires, x);
  }  // NCCL is torn down before MPI
  if (host->rank() != 0) return;
  write_ep_outputs(out, placement, host->size(), args);
}

}  // namespace moe::cli::detail
