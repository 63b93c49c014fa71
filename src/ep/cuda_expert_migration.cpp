// migrate_device_experts: expert slots moved to a new placement between GPUs. Every rank walks the same
// plan (plan_moves) in the same order, posting a send per slot it gives and a receive per slot it gets, so
// that the blocks of each pair of ranks pair up in that order; an expert kept on a rank is a copy on its GPU.
// Two blocks an expert (its w13 and w2 rows are apart in the layout), each sent from where the old slot
// lies and received where the new one lies: no packing, no staging beyond the new slots themselves.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/check.h"
#include "ep/cuda_expert_slots.h"
#include "ep/device_expert_slots.h"
#include "ep/expert_migration.h"
#include "moe/core/check.h"

namespace moe::ep {

namespace {

size_t slot_of(const std::vector<int32_t>& held, int32_t expert) {
  return static_cast<size_t>(std::find(held.begin(), held.end(), expert) - held.begin());
}

}  // namespace

DeviceMigration migrate_device_experts(DeviceCommunicator& comm, const Placement& from, const Placement& to,
                                       const DeviceExpertSlots& current, int64_t H, int64_t I,
                                       DeviceStream stream) {
  const int R = comm.size(), me = comm.rank();
  check_placement(from, from.n_experts, R);
  check_placement(to, from.n_experts, R);
  const std::vector<ExpertMove> moves = plan_moves(from, to);  // refuses a `to` with an expert on no rank
  const std::vector<int32_t>& old_slots = from.rank_experts[me];
  const std::vector<int32_t>& new_slots = to.rank_experts[me];
  check_device_slots(current, static_cast<int64_t>(old_slots.size()), H, I, "device migration");

  const int64_t w13_bytes = 2 * I * H * static_cast<int64_t>(sizeof(uint16_t));  // one slot's, bf16
  const int64_t w2_bytes = H * I * static_cast<int64_t>(sizeof(uint16_t));
  const auto* old_w13 = static_cast<const char*>(current.w13.data());
  const auto* old_w2 = static_cast<const char*>(current.w2.data());
  DeviceMigration out{.slots = allocate_device_slots(static_cast<int64_t>(new_slots.size()), H, I)};
  auto* new_w13 = static_cast<char*>(out.slots.w13.data());
  auto* new_w2 = static_cast<char*>(out.slots.w2.data());

  std::vector<DeviceSend> sends;
  std::vector<DeviceRecv> recvs;
  for (const ExpertMove& m : moves) {
    if (m.from_rank == me) {
      const size_t s = slot_of(old_slots, m.expert);
      sends.push_back({.peer = m.to_rank, .data = old_w13 + s * w13_bytes, .bytes = w13_bytes});
      sends.push_back({.peer = m.to_rank, .data = old_w2 + s * w2_bytes, .bytes = w2_bytes});
      out.bytes_sent += w13_bytes + w2_bytes;
    }
    if (m.to_rank == me) {
      const size_t s = slot_of(new_slots, m.expert);
      recvs.push_back({.peer = m.from_rank, .data = new_w13 + s * w13_bytes, .bytes = w13_bytes});
      recvs.push_back({.peer = m.from_rank, .data = new_w2 + s * w2_bytes, .bytes = w2_bytes});
      out.bytes_received += w13_bytes + w2_bytes;
    }
  }
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  for (size_t s = 0; s < new_slots.size(); ++s) {
    const size_t kept = slot_of(old_slots, new_slots[s]);
    if (kept == old_slots.size()) continue;  // received
    MOE_CUDA_CHECK(cudaMemcpyAsync(new_w13 + s * w13_bytes, old_w13 + kept * w13_bytes, w13_bytes,
                                   cudaMemcpyDeviceToDevice, cuda_stream));
    MOE_CUDA_CHECK(cudaMemcpyAsync(new_w2 + s * w2_bytes, old_w2 + kept * w2_bytes, w2_bytes,
                                   cudaMemcpyDeviceToDevice, cuda_stream));
  }
  comm.send_recv(sends, recvs, stream);
  MOE_CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
  return out;
}

}  // namespace moe::ep
