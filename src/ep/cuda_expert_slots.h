#pragma once
// Device expert slots (device_expert_slots.h) made on this rank's GPU: fresh buffers for a migration to fill,
// or this rank's experts uploaded from SwigluWeights (the checkpoint's, or device tensors) by upload_mlps.

#include <cstdint>
#include <vector>

#include "ep/device_expert_slots.h"
#include "moe/core/expert_batch.h"

namespace moe::ep {

// Uninitialised slots of the layout: w13 [slots, 2I, H], w2 [slots, H, I] bf16 (slots may be 0).
DeviceExpertSlots allocate_device_slots(int64_t slots, int64_t H, int64_t I);

// The experts in slot order in the layout, I padded (the padding zero). Synchronises.
DeviceExpertSlots upload_device_slots(const std::vector<const SwigluWeights*>& experts, int64_t H, int64_t I);

// Throws moe::Error unless `slots` holds `count` experts of the layout on the GPU (what: who asks).
void check_device_slots(const DeviceExpertSlots& slots, int64_t count, int64_t H, int64_t I, const char* what);

}  // namespace moe::ep
