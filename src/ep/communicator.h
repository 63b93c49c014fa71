#pragma once
// The transport of expert parallelism: R ranks that exchange bytes. Only ep/ knows about ranks; the
// layers above see a Communicator and nothing of MPI (or, later, NCCL).

#include <cstdint>
#include <memory>
#include <span>

namespace moe::ep {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // values[i] = sum over ranks of values[i], in place; every rank passes the same length.
  virtual void allreduce_sum(std::span<int64_t> values) = 0;
  // All-to-all of bytes with per-peer counts and displacements (MPI_Alltoallv semantics):
  //   send_counts/send_displs [size]: bytes for peer p are send[send_displs[p], + send_counts[p])
  //   recv_counts/recv_displs [size]: bytes from peer p land at recv[recv_displs[p], + recv_counts[p])
  // recv_counts must equal what the peers send (exchange the counts first).
  virtual void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                         void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs) = 0;
  // Plain all-to-all (MPI_Alltoall semantics): send [size, block_bytes], block p to peer p; recv [size,
  // block_bytes], block p from peer p. The transport's floor for dispatch and combine (`moe bench --dispatch`).
  virtual void alltoall(const void* send, void* recv, int64_t block_bytes) = 0;
  // data [bytes] of rank `root` copied to every rank's data [bytes] (MPI_Bcast semantics; every rank passes
  // the same count). A rank may wait in it for long (a server's followers wait for the next step), so the
  // transport waits without spinning a core.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
};

// Whether this build has the MPI transport (MPI found at configure time).
bool mpi_available();

// The MPI world (initialised here, finalised when the last MPI communicator is destroyed). Throws moe::Error
// when the build has no MPI, naming the fix (install libopenmpi-dev and rebuild).
std::unique_ptr<Communicator> make_mpi_communicator();

// One rank, no transport: expert parallelism degenerates to the local layer (R = 1 without MPI).
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace moe::ep
