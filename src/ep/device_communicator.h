#pragma once
// The GPU transport of expert parallelism: R ranks, one GPU each, that exchange device memory. The GPU
// sibling of Communicator: its collectives take device pointers and a CUDA stream and only enqueue work on
// it, so token rows never pass through the host. The host Communicator (MPI) it is built over stays the
// bootstrap and the channel for small host-side collectives (barriers, statistics).
// Free of CUDA and NCCL headers: callers see the stream as the runtime's opaque handle.

#include <cstdint>
#include <memory>
#include <span>

#include "ep/communicator.h"

struct CUstream_st;

namespace moe::ep {

using DeviceStream = CUstream_st*;  // cudaStream_t

// One block of device bytes for a peer (DeviceCommunicator::send_recv).
struct DeviceSend {
  int peer = 0;
  const void* data = nullptr;
  int64_t bytes = 0;
};
struct DeviceRecv {
  int peer = 0;
  void* data = nullptr;
  int64_t bytes = 0;
};

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The CUDA device this rank uses (set current by the factory).
  virtual int device() const = 0;
  // The host communicator of the same ranks (bootstrap, barriers, host statistics).
  virtual Communicator& host() = 0;
  // All-to-all of device bytes with per-peer counts and displacements (host arrays, bytes; MPI_Alltoallv
  // semantics as in Communicator::alltoallv), enqueued on `stream`. recv_counts must equal what the peers
  // send. The block to this rank itself is a device-to-device copy.
  virtual void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                         void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                         DeviceStream stream) = 0;
  // Point-to-point blocks posted as one group on `stream` (so that no order of posting deadlocks): each
  // send to its peer, each receive from its peer. The blocks between two ranks pair up in the order both
  // sides list them, and a pair's bytes must agree. No block names this rank (a local copy is the caller's).
  // Collective over the ranks the blocks name: they must all call it.
  virtual void send_recv(std::span<const DeviceSend> sends, std::span<const DeviceRecv> recvs,
                         DeviceStream stream) = 0;
  // Plain all-to-all of device bytes: send [size, block_bytes], block p to peer p; recv [size, block_bytes].
  void alltoall(const void* send, void* recv, int64_t block_bytes, DeviceStream stream);
};

// Whether this build has the NCCL transport (CUDA, MPI and NCCL found at configure time).
bool nccl_available();

// The NCCL communicator over the ranks of `host`: rank r uses GPU local_rank (the rank's index among the
// ranks of its host, from the launcher's environment: OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
// SLURM_LOCALID; else r mod the visible GPUs), makes it current, and joins the NCCL communicator whose
// unique id rank 0 made and shared over `host`. Collective over `host`. Throws moe::Error when the build
// has no NCCL, or when the host has fewer GPUs than ranks. `host` must outlive the result.
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host);

}  // namespace moe::ep
