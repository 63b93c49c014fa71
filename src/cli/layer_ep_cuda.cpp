// moe layer --ep --backend cuda: one process per GPU; MPI starts the ranks, NCCL moves the rows.
#include "layer_ep.h"

#include <algorithm>

#include "ep/data_parallel.h"
#include "ep/ep_layer.h"

namespace moe::cli::detail {

void run_layer_ep_cuda(const MoeConfig& config, const MoeWeights& weights, const Tensor& x, const EpLayerArgs& args) {
  const std::unique_ptr<ep::Communicator> host = ep::make_mpi_communicator();
  const ep::Placement placement = run_placement(args, config.router.n_experts, host->size());
  ep::EpOutput out;
  {
    const std::unique_ptr<ep::DeviceCommunicator> comm = ep::make_nccl_communicator(*host);
    // One forward of all x: every rank's workspace sized for its largest slice.
    ep::EpLayer layer = ep::make_cuda_ep_layer(*comm, config, weights, placement, args.wires,
                                               std::max<int64_t>(x.dim() == 2 ? x.size(0) : 1, 1));
    out = ep::forward_data_parallel(layer, x);
  }  // the layer and NCCL are torn down before MPI
  if (host->rank() != 0) return;
  write_ep_outputs(out, placement, host->size(), args);
}

}  // namespace moe::cli::detail
