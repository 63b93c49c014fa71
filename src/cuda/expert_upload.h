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

// FP8 copies of uploaded MLPs, in the layout DecodeWeights takes (cuda/ops.h): e4m3 values in w13's and w2's
// layouts, one fp32 scale per 128x128 block of each matrix (gate and up quantised apart, so that no block
// spans both): w13_scale [mlps, 2, ceil(I / 128), ceil(H / 128)], w2_scale [mlps, ceil(H / 128),
// ceil(I / 128)]. Throws moe::Error where a weight holds a NaN or an Inf. Synchronises.
struct Fp8Mlps {
  DeviceBuffer<uint8_t> w13, w2;
  DeviceBuffer<float> w13_scale, w2_scale;
  size_t bytes() const { return w13.size() + w2.size() + 4 * (w13_scale.size() + w2_scale.size()); }
};
Fp8Mlps quantize_mlps_fp8(const DeviceBuffer<bf16>& w13, const DeviceBuffer<bf16>& w2, int64_t mlps, int64_t H,
                          int64_t I);

// INT4 copies of uploaded MLPs, in the layout DecodeWeights takes (int4_tiles.h): w13 quantised as one
// [mlps * 2I, H] matrix, w2 as [mlps * H, I], one scale and zero point per row and 128 inputs, by
// quant/int4_awq.h's round-to-nearest (quantize_int4_tiles). H and I multiples of 128. Throws moe::Error where
// a weight holds a NaN or an Inf. Synchronises.
struct Int4Mlps {
  DeviceBuffer<uint8_t> w13, w2;
  DeviceBuffer<uint32_t> w13_scale_zero, w2_scale_zero;
  size_t bytes() const { return w13.size() + w2.size() + 4 * (w13_scale_zero.size() + w2_scale_zero.size()); }
};
Int4Mlps quantize_mlps_int4(const DeviceBuffer<bf16>& w13, const DeviceBuffer<bf16>& w2, int64_t mlps, int64_t H,
                            int64_t I);

}  // namespace moe::cuda
