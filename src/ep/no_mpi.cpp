// Built instead of mpi_communicator.cpp where CMake found no MPI: the factory says how to get it.
#include "moe/core/check.h"
#include "ep/communicator.h"

namespace moe::ep {

bool mpi_available() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator() {
  MOE_FAIL("expert parallelism needs MPI, and this build has none: install it (apt-get install "
           "libopenmpi-dev openmpi-bin, or scripts/setup.sh) and rebuild");
}

}  // namespace moe::ep
