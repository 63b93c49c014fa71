// The one-rank communicator: every collective is a local copy.
#include <cstring>

#include "moe/core/check.h"
#include "ep/communicator.h"

namespace moe::ep {

namespace {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}
  void allreduce_sum(std::span<int64_t>) override {}
  void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                 void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs) override {
    MOE_CHECK(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0],
              "alltoallv on one rank: sending {} bytes to itself but expecting {}", send_counts[0], recv_counts[0]);
    if (send_counts[0] > 0)
      std::memcpy(static_cast<char*>(recv) + recv_displs[0], static_cast<const char*>(send) + send_displs[0],
                  static_cast<size_t>(send_counts[0]));
  }
  void alltoall(const void* send, void* recv, int64_t block_bytes) override {
    if (block_bytes > 0) std::memcpy(recv, send, static_cast<size_t>(block_bytes));
  }
  void broadcast(void*, int64_t, int root) override {
    MOE_CHECK(root == 0, "broadcast on one rank: the root {} is not rank 0", root);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace moe::ep
