#pragma once
// One rank's routed experts on its GPU as the expert-parallel layer's grouped GEMMs read them, in slot order
// (placement.rank_experts[rank]), and their move to a new placement device to device (elastic expert
// parallelism on GPUs). Free of CUDA headers: the engine holds them through plain device tensors.
//   w13 [slots, 2I, H] bf16  gate rows, then up rows
//   w2  [slots, H, I]  bf16
// I is the intermediate size padded up to the kernels' tile width (64); the padding is zero.

#include <cstdint>

#include "ep/device_communicator.h"
#include "ep/placement.h"
#include "moe/core/tensor.h"

namespace moe::ep {

// Device tensors that own their memory, shared by every layer that runs on them (no copy): a migration
// makes new ones, and the old ones are freed with the last layer that holds them.
struct DeviceExpertSlots {
  Tensor w13, w2;
  int64_t count() const { return w13.dim() == 3 ? w13.size(0) : 0; }
};

struct DeviceMigration {
  DeviceExpertSlots slots;     // this rank's new slots, to.rank_experts[rank] order: fresh staging buffers
  int64_t bytes_sent = 0;      // expert weight bytes this rank sent to others
  int64_t bytes_received = 0;  // expert weight bytes this rank received from others
};

// Collective over `comm`: this rank's slots of `to` from its slots of `from` (`current`, of hidden size H and
// padded intermediate I): an expert it keeps is copied on its GPU, one it newly holds comes from the rank
// that plan_moves names (NCCL send/recv between the GPUs; nothing passes through the host). `current` is
// only read, so the layer on it keeps serving until the caller switches; the copies are complete when this
// returns (it synchronises `stream`). Throws moe::Error before any copy: for placements of other sizes or a
// `to` that leaves an expert on no rank (on every rank alike), or for slots of another shape or count.
DeviceMigration migrate_device_experts(DeviceCommunicator& comm, const Placement& from, const Placement& to,
                                       const DeviceExpertSlots& current, int64_t H, int64_t I,
                                       DeviceStream stream);

}  // namespace moe::ep
