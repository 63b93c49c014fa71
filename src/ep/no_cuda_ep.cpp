// Built instead of the GPU stages (moe_ep_cuda) where CMake found no CUDA compiler: the factories say how
// to get them.
#include "moe/core/check.h"
#include "ep/device_expert_slots.h"
#include "ep/ep_layer.h"

namespace moe::ep {

namespace {

[[noreturn]] void no_cuda() {
  MOE_FAIL("expert parallelism on GPUs needs the CUDA backend, and this build has none: configure on a machine "
           "with nvcc (MOE_CUDA=ON), then rebuild");
}

}  // namespace

EpLayer make_cuda_ep_layer(DeviceCommunicator&, const MoeConfig&, const MoeWeights&, Placement, EpWires, int64_t) {
  no_cuda();
}

EpLayer make_cuda_ep_layer(DeviceCommunicator&, const MoeConfig&, const MoeWeights&, Placement, DeviceExpertSlots,
                           EpWires, int64_t) {
  no_cuda();
}

DeviceMigration migrate_device_experts(DeviceCommunicator&, const Placement&, const Placement&,
                                       const DeviceExpertSlots&, int64_t, int64_t, DeviceStream) {
  no_cuda();
}

}  // namespace moe::ep
