#include "ep/cuda_expert_slots.h"

#include <memory>

#include "cuda/device_buffer.h"
#include "cuda/expert_upload.h"
#include "moe/core/check.h"

namespace moe::ep {

namespace {

using cuda::bf16;
using cuda::DeviceBuffer;

// A device tensor that owns `buffer` (the tensor's views share it).
Tensor owning_view(DeviceBuffer<bf16> buffer, std::vector<int64_t> shape) {
  auto owner = std::make_shared<DeviceBuffer<bf16>>(std::move(buffer));
  return Tensor::view(owner->get(), DType::BF16, std::move(shape), owner, Device::cuda);
}

}  // namespace

DeviceExpertSlots allocate_device_slots(int64_t slots, int64_t H, int64_t I) {
  return {.w13 = owning_view(DeviceBuffer<bf16>(slots * 2 * I * H), {slots, 2 * I, H}),
          .w2 = owning_view(DeviceBuffer<bf16>(slots * H * I), {slots, H, I})};
}

DeviceExpertSlots upload_device_slots(const std::vector<const SwigluWeights*>& experts, int64_t H, int64_t I) {
  const auto n = static_cast<int64_t>(experts.size());
  if (n == 0) return allocate_device_slots(0, H, I);
  DeviceBuffer<bf16> w13, w2;
  cuda::upload_mlps(experts, H, I, w13, w2);
  return {.w13 = owning_view(std::move(w13), {n, 2 * I, H}), .w2 = owning_view(std::move(w2), {n, H, I})};
}

void check_device_slots(const DeviceExpertSlots& slots, int64_t count, int64_t H, int64_t I, const char* what) {
  const std::vector<int64_t> w13 = {count, 2 * I, H}, w2 = {count, H, I};
  for (const Tensor* t : {&slots.w13, &slots.w2})
    MOE_CHECK(t->defined() && t->device() == Device::cuda && t->dtype() == DType::BF16 && t->is_contiguous(),
              "{}: device expert slots must be contiguous bf16 tensors on the GPU (upload_device_slots or a "
              "layer's device_slots)", what);
  MOE_CHECK(slots.w13.shape() == w13 && slots.w2.shape() == w2,
            "{}: device expert slots w13 {} and w2 {}, expected [{}, {}, {}] and [{}, {}, {}] (the placement's "
            "slots of this rank, I padded to 64)",
            what, slots.w13.shape_string(), slots.w2.shape_string(), count, 2 * I, H, count, H, I);
}

}  // namespace moe::ep
