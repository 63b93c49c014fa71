#pragma once
// Expert weights in the grouped GEMMs' device layout, shared by the single-GPU layer and the expert-parallel
// layer (ep/): [n, 2I, H] bf16 (gate rows, then up rows) and [n, H, I] bf16, with I padded up to the
// kernels' tile width.

#include <cstdint>
#include <vector>

#include "moe/core/expert_batch.h"
#include "cuda/device_buffer.h"
#include "cuda/ops.h"

namespace moe::cuda {

// The kernels' tile width: intermediate sizes are padded up to a multiple of it.
constexpr int64_t kIntermediateAlign = 64;

inline int64_t padded_intermediate(int64_t I) {
  return (I + kIntermediateAlign - 1) / kIntermediateAlign * kIntermediateAlign;
}

// Uploads SwiGLU MLPs (host tensors, or bf16 device tensors, copied on the device) whose true intermediate
// size (their gate rows) may be below the padded I: the extra gate/up rows and down columns are zero, which
// is exact (silu(0) · 0 = 0, and the zero columns of down multiply those zeros). w13 [mlps, 2I, H], w2 [mlps,
// H, I].
void upload_mlps(const std::vector<const SwigluWeights*>& mlps, int64_t H, int64_t I, DeviceBuffer<bf16>& w13,
                 DeviceBuffer<bf16>& w2);

}  // namespace moe::cuda
