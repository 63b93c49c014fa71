#include "cuda/expert_upload.h"

#include <algorithm>

#include "cuda/check.h"
#include "cuda/pinned_upload.h"
#include "moe/core/check.h"

namespace moe::cuda {

namespace {

// MLPs already on the device in bf16 (random weights made there): copied into the padded layout on the
// device, the padding zeroed.
void copy_device_mlps(const std::vector<const SwigluWeights*>& mlps, int64_t H, int64_t I,
                      DeviceBuffer<bf16>& w13, DeviceBuffer<bf16>& w2) {
  MOE_CUDA_CHECK(cudaMemset(w13.get(), 0, w13.size() * sizeof(bf16)));
  MOE_CUDA_CHECK(cudaMemset(w2.get(), 0, w2.size() * sizeof(bf16)));
  for (size_t e = 0; e < mlps.size(); ++e) {
    const SwigluWeights& m = *mlps[e];
    const int64_t rows = m.gate.size(0);  // the MLP's true intermediate size
    for (const Tensor* t : {&m.gate, &m.up, &m.down})
      MOE_CHECK(t->device() == Device::cuda && t->dtype() == DType::BF16 && t->strides().back() == 1,
                "upload_mlps: device expert weights must be bf16 with contiguous rows, got {} {}",
                dtype_name(t->dtype()), t->shape_string());
    const size_t row_bytes = H * sizeof(bf16);
    bf16* gate_up = w13.get() + e * 2 * I * H;
    MOE_CUDA_CHECK(cudaMemcpy2D(gate_up, row_bytes, m.gate.data(), m.gate.strides()[0] * sizeof(bf16),
                                row_bytes, rows, cudaMemcpyDeviceToDevice));
    MOE_CUDA_CHECK(cudaMemcpy2D(gate_up + I * H, row_bytes, m.up.data(), m.up.strides()[0] * sizeof(bf16),
                                row_bytes, rows, cudaMemcpyDeviceToDevice));
    MOE_CUDA_CHECK(cudaMemcpy2D(w2.get() + e * H * I, I * sizeof(bf16), m.down.data(),
                                m.down.strides()[0] * sizeof(bf16), rows * sizeof(bf16), H,
                                cudaMemcpyDeviceToDevice));
  }
}

}  // namespace

void upload_mlps(const std::vector<const SwigluWeights*>& mlps, int64_t H, int64_t I, DeviceBuffer<bf16>& w13,
                 DeviceBuffer<bf16>& w2) {
  w13 = DeviceBuffer<bf16>(mlps.size() * 2 * I * H);
  w2 = DeviceBuffer<bf16>(mlps.size() * H * I);
  if (!mlps.empty() && mlps[0]->gate.device() == Device::cuda) return copy_device_mlps(mlps, H, I, w13, w2);
  // NOTE: bf16 rows go from the checkpoint's memory map into the padded layout as they are (through the
  // upload's page-locked chunks); another dtype is converted once, on the host.
  PinnedUpload upload;
  upload.zero(w13.get(), w13.size() * sizeof(bf16));
  upload.zero(w2.get(), w2.size() * sizeof(bf16));
  const auto rows_of = [&](const Tensor& t, bf16* dst, size_t dst_pitch) {
    MOE_CHECK(t.dim() == 2 && t.size(1) * sizeof(bf16) <= dst_pitch,
              "upload_mlps: an expert weight {} does not fit rows of {} values", t.shape_string(),
              dst_pitch / sizeof(bf16));
    const Tensor b = t.dtype() == DType::BF16 && t.strides().back() == 1 ? t : t.to(DType::BF16);
    upload.copy_rows(dst, dst_pitch, b.data(), b.strides()[0] * sizeof(bf16), b.size(1) * sizeof(bf16),
                     b.size(0));
  };
  for (size_t e = 0; e < mlps.size(); ++e) {
    const SwigluWeights& m = *mlps[e];
    bf16* gate_up = w13.get() + e * 2 * I * H;
    rows_of(m.gate, gate_up, H * sizeof(bf16));      // [rows, H] into [I, H]
    rows_of(m.up, gate_up + I * H, H * sizeof(bf16));  // [rows, H] into [I, H]
    rows_of(m.down, w2.get() + e * H * I, I * sizeof(bf16));  // [H, rows] into [H, I]
  }
  upload.finish();
}

Fp8Mlps quantize_mlps_fp8(const DeviceBuffer<bf16>& w13, const DeviceBuffer<bf16>& w2, int64_t mlps, int64_t H,
                          int64_t I) {
  const auto blocks = [](int64_t extent) { return (extent + 127) / 128; };
  Fp8Mlps q{.w13 = DeviceBuffer<uint8_t>(w13.size()), .w2 = DeviceBuffer<uint8_t>(w2.size()),
            .w13_scale = DeviceBuffer<float>(mlps * 2 * blocks(I) * blocks(H)),
            .w2_scale = DeviceBuffer<float>(mlps * blocks(H) * blocks(I))};
  DeviceBuffer<int> non_finite(1);
  MOE_CUDA_CHECK(cudaMemset(non_finite.get(), 0, sizeof(int)));
  quantize_fp8_block(w13.get(), 2 * mlps, I, H, q.w13.get(), q.w13_scale.get(), non_finite.get(), nullptr);
  quantize_fp8_block(w2.get(), mlps, H, I, q.w2.get(), q.w2_scale.get(), non_finite.get(), nullptr);
  int bad = 0;
  MOE_CUDA_CHECK(cudaMemcpy(&bad, non_finite.get(), sizeof(int), cudaMemcpyDeviceToHost));
  MOE_CHECK(bad == 0, "an expert weight holds a NaN or an Inf: it has no fp8 block scale (check the checkpoint)");
  return q;
}

Int4Mlps quantize_mlps_int4(const DeviceBuffer<bf16>& w13, const DeviceBuffer<bf16>& w2, int64_t mlps, int64_t H,
                            int64_t I) {
  MOE_CHECK(H % 128 == 0 && I % 128 == 0, "int4 experts on the GPU need hidden and intermediate sizes that are "
            "multiples of 128, got {} and {}", H, I);
  Int4Mlps q{.w13 = DeviceBuffer<uint8_t>(w13.size() / 2), .w2 = DeviceBuffer<uint8_t>(w2.size() / 2),
             .w13_scale_zero = DeviceBuffer<uint32_t>(w13.size() / 128),
             .w2_scale_zero = DeviceBuffer<uint32_t>(w2.size() / 128)};
  DeviceBuffer<int> non_finite(1);
  MOE_CUDA_CHECK(cudaMemset(non_finite.get(), 0, sizeof(int)));
  quantize_int4_tiles(w13.get(), mlps * 2 * I, H, q.w13.get(), q.w13_scale_zero.get(), non_finite.get(), nullptr);
  quantize_int4_tiles(w2.get(), mlps * H, I, q.w2.get(), q.w2_scale_zero.get(), non_finite.get(), nullptr);
  int bad = 0;
  MOE_CUDA_CHECK(cudaMemcpy(&bad, non_finite.get(), sizeof(int), cudaMemcpyDeviceToHost));
  MOE_CHECK(bad == 0, "an expert weight holds a NaN or an Inf: it cannot be quantised to int4 (check the checkpoint)");
  return q;
}

}  // namespace moe::cuda
