// The MPI transport (built only where CMake found MPI).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include "moe/core/check.h"
#include "ep/communicator.h"

#define MOE_MPI_CHECK(call)                                                             \
  do {                                                                                  \
    const int moe_mpi_status = (call);                                                  \
    MOE_CHECK(moe_mpi_status == MPI_SUCCESS, "{} failed with MPI error {}", #call, moe_mpi_status); \
  } while (0)

namespace moe::ep {

namespace {

// NOTE: MPI may be initialised once per process; communicators share it and the last one finalises.
int g_live_communicators = 0;

std::vector<int> to_int(std::span<const int64_t> values, const char* what) {
  std::vector<int> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    MOE_CHECK(values[i] >= 0 && values[i] <= INT_MAX, "alltoallv: {} {} for peer {} does not fit MPI's int counts",
              what, values[i], i);
    out[i] = static_cast<int>(values[i]);
  }
  return out;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialised = 0;
    MOE_MPI_CHECK(MPI_Initialized(&initialised));
    if (!initialised) {
      // SERIALIZED: one thread calls MPI at a time, not always the one that initialised it (moe serve's
      // scheduler thread steps the engine on rank 0); the thread pool does compute only.
      int provided = 0;
      MOE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      MOE_CHECK(provided >= MPI_THREAD_SERIALIZED,
                "this MPI library gives thread level {}, below MPI_THREAD_SERIALIZED: use Open MPI or MPICH "
                "built with thread support", provided);
      // NOTE: errors return (and throw moe::Error: an `error:` line, exit 2) instead of aborting the job
      // without a word; a peer that dies makes the launcher stop every rank.
      MOE_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    }
    ++g_live_communicators;
    MOE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MOE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  }
  ~MpiCommunicator() override {
    if (--g_live_communicators == 0) MPI_Finalize();
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { MOE_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }
  void allreduce_sum(std::span<int64_t> values) override {
    MOE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T, MPI_SUM,
                                MPI_COMM_WORLD));
  }
  void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                 void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs) override {
    MOE_CHECK(static_cast<int>(send_counts.size()) == size_ && static_cast<int>(recv_counts.size()) == size_ &&
                  send_displs.size() == send_counts.size() && recv_displs.size() == recv_counts.size(),
              "alltoallv: counts for {} / {} peers on a world of {}", send_counts.size(), recv_counts.size(), size_);
    const std::vector<int> sc = to_int(send_counts, "send count"), sd = to_int(send_displs, "send displacement");
    const std::vector<int> rc = to_int(recv_counts, "receive count"), rd = to_int(recv_displs, "receive displacement");
    MOE_MPI_CHECK(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE,
                                MPI_COMM_WORLD));
  }
  void alltoall(const void* send, void* recv, int64_t block_bytes) override {
    MOE_CHECK(block_bytes >= 0 && block_bytes <= INT_MAX, "alltoall: {} bytes per peer do not fit MPI's int count",
              block_bytes);
    MOE_MPI_CHECK(MPI_Alltoall(send, static_cast<int>(block_bytes), MPI_BYTE, recv, static_cast<int>(block_bytes),
                               MPI_BYTE, MPI_COMM_WORLD));
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    MOE_CHECK(bytes >= 0 && bytes <= INT_MAX, "broadcast: {} bytes do not fit MPI's int count", bytes);
    // NOTE: a blocking MPI_Bcast spins while it waits, which takes a core from the ranks that compute (and
    // all of an idle server's): the non-blocking one, tested at once and then with sleeps growing to 1 ms.
    MPI_Request request = MPI_REQUEST_NULL;
    MOE_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &request));
    auto pause = std::chrono::microseconds(0);
    for (int done = 0;;) {
      MOE_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
      pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(10));
    }
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace moe::ep
