// Built instead of nccl_communicator.cpp where CMake found no NCCL (or no CUDA or MPI): the factory says
// how to get it.
#include "moe/core/check.h"
#include "ep/device_communicator.h"

namespace moe::ep {

bool nccl_available() { return false; }

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator&) {
  MOE_FAIL("expert parallelism on GPUs needs NCCL, and this build has none: install CUDA with "
           "NCCL (nccl.h and libnccl) and MPI (libopenmpi-dev), then reconfigure and rebuild");
}

}  // namespace moe::ep
