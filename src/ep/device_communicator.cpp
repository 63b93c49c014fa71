#include "ep/device_communicator.h"

#include <vector>

namespace moe::ep {

void DeviceCommunicator::alltoall(const void* send, void* recv, int64_t block_bytes, DeviceStream stream) {
  const int R = size();
  std::vector<int64_t> counts(R, block_bytes), displs(R);  // [R]
  for (int p = 0; p < R; ++p) displs[p] = p * block_bytes;
  alltoallv(send, counts, displs, recv, counts, displs, stream);
}

}  // namespace moe::ep
