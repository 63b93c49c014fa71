// Built instead of the GPU stages (moe_ep_cuda) where CMake found no CUDA compiler: the factory says how
// to get them.
#include "moe/core/check.h"
#include "ep/ep_layer.h"

namespace moe::ep {

EpLayer make_cuda_ep_layer(DeviceCommunicator&, const MoeConfig&, const MoeWeights&, Placement, EpWires, int64_t) {
  MOE_FAIL("expert parallelism on GPUs needs the CUDA backend, and this build has none: configure on a machine "
           "with nvcc (MOE_CUDA=ON), then rebuild");
}

}  // namespace moe::ep
