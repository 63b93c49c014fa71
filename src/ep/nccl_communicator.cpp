// The NCCL transport (built only where CMake found CUDA, MPI and NCCL): one GPU per rank, the unique id
// shared over the host communicator, all-to-all-v and point-to-point blocks as grouped ncclSend/ncclRecv on
// the caller's stream.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "moe/core/check.h"
#include "cuda/check.h"
#include "ep/device_communicator.h"
#include "ep/nccl_check.h"

namespace moe::ep {

namespace {

// The rank's index among the ranks of its host, from the launcher; -1 when no launcher variable is set.
int launcher_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name); value && *value) return std::atoi(value);
  }
  return -1;
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  explicit NcclCommunicator(Communicator& host) : host_(host) {
    int n_gpus = 0;
    if (cudaGetDeviceCount(&n_gpus) != cudaSuccess) n_gpus = 0;
    const int local = launcher_local_rank();
    device_ = local >= 0 ? local : host.rank() % std::max(n_gpus, 1);
    // NOTE: the ranks agree first whether every one of them has its GPU: a rank that threw alone would leave
    // the others waiting for it in the collectives below.
    int64_t unfit[1] = {n_gpus >= 1 && device_ < n_gpus ? 0 : 1};
    host.allreduce_sum(unfit);
    MOE_CHECK(n_gpus >= 1, "rank {}: no GPU is visible, and expert parallelism on GPUs needs one per rank (run "
              "it on the CPU instead)", host.rank());
    MOE_CHECK(device_ < n_gpus,
              "rank {} is local rank {} of its host, which has {} GPU(s): run one process per GPU (mpirun -np {} "
              "on one host)",
              host.rank(), local, n_gpus, n_gpus);
    MOE_CHECK(unfit[0] == 0, "rank {}: {} of the {} ranks have no GPU of their own (see their errors): run one "
              "process per GPU", host.rank(), unfit[0], host.size());
    MOE_CUDA_CHECK(cudaSetDevice(device_));

    // NOTE: a broadcast as a sum: rank 0 contributes the id, the others zeros, so the sum is rank 0's bytes.
    ncclUniqueId id{};
    static_assert(sizeof(id) % sizeof(int64_t) == 0);
    int64_t words[sizeof(id) / sizeof(int64_t)] = {};
    if (host.rank() == 0) {
      MOE_NCCL_CHECK(ncclGetUniqueId(&id));
      std::memcpy(words, &id, sizeof(id));
    }
    host.allreduce_sum(words);
    std::memcpy(&id, words, sizeof(id));
    MOE_NCCL_CHECK(ncclCommInitRank(&comm_, host.size(), id, host.rank()));
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int device() const override { return device_; }
  Communicator& host() override { return host_; }

  void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                 void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                 DeviceStream stream) override {
    const int R = size(), me = rank();
    MOE_CHECK(static_cast<int>(send_counts.size()) == R && static_cast<int>(recv_counts.size()) == R &&
                  send_displs.size() == send_counts.size() && recv_displs.size() == recv_counts.size(),
              "device alltoallv: counts for {} / {} peers on a world of {}", send_counts.size(), recv_counts.size(),
              R);
    MOE_CHECK(send_counts[me] == recv_counts[me], "device alltoallv: rank {} sends {} bytes to itself but expects {}",
              me, send_counts[me], recv_counts[me]);
    const auto* s = static_cast<const char*>(send);
    auto* r = static_cast<char*>(recv);
    if (send_counts[me] > 0)
      MOE_CUDA_CHECK(cudaMemcpyAsync(r + recv_displs[me], s + send_displs[me], static_cast<size_t>(send_counts[me]),
                                     cudaMemcpyDeviceToDevice, stream));
    // Every peer pair posts its send and receive in one group, so NCCL schedules them together (no ordering
    // deadlock) and overlaps them.
    MOE_NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < R; ++p) {
      if (p == me) continue;
      if (send_counts[p] > 0)
        MOE_NCCL_CHECK(ncclSend(s + send_displs[p], static_cast<size_t>(send_counts[p]), ncclUint8, p, comm_, stream));
      if (recv_counts[p] > 0)
        MOE_NCCL_CHECK(ncclRecv(r + recv_displs[p], static_cast<size_t>(recv_counts[p]), ncclUint8, p, comm_, stream));
    }
    MOE_NCCL_CHECK(ncclGroupEnd());
  }

  void send_recv(std::span<const DeviceSend> sends, std::span<const DeviceRecv> recvs, DeviceStream stream) override {
    const int R = size(), me = rank();
    for (const DeviceSend& b : sends)
      MOE_CHECK(b.peer >= 0 && b.peer < R && b.peer != me && b.bytes >= 0,
                "device send_recv: rank {} sends {} bytes to peer {} (a peer is another of the {} ranks)", me,
                b.bytes, b.peer, R);
    for (const DeviceRecv& b : recvs)
      MOE_CHECK(b.peer >= 0 && b.peer < R && b.peer != me && b.bytes >= 0,
                "device send_recv: rank {} receives {} bytes from peer {} (a peer is another of the {} ranks)", me,
                b.bytes, b.peer, R);
    if (sends.empty() && recvs.empty()) return;
    // NOTE: NCCL matches the sends and receives of one pair of ranks in the order they are posted.
    MOE_NCCL_CHECK(ncclGroupStart());
    for (const DeviceSend& b : sends)
      if (b.bytes > 0) MOE_NCCL_CHECK(ncclSend(b.data, static_cast<size_t>(b.bytes), ncclUint8, b.peer, comm_, stream));
    for (const DeviceRecv& b : recvs)
      if (b.bytes > 0) MOE_NCCL_CHECK(ncclRecv(b.data, static_cast<size_t>(b.bytes), ncclUint8, b.peer, comm_, stream));
    MOE_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  Communicator& host_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}

}  // namespace moe::ep
