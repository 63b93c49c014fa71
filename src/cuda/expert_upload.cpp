#include "cuda/expert_upload.h"

#include <algorithm>

#include "cuda/check.h"
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
  std::vector<uint16_t> gate_up(2 * I * H), down(H * I);  // one MLP, padded, bf16 bits
  for (size_t e = 0; e < mlps.size(); ++e) {
    const int64_t rows = mlps[e]->gate.size(0);  // the MLP's true intermediate size
    const Tensor gate = mlps[e]->gate.to(DType::BF16), up = mlps[e]->up.to(DType::BF16);
    const Tensor w_down = mlps[e]->down.to(DType::BF16);  // [H, rows]
    std::fill(gate_up.begin(), gate_up.end(), uint16_t{0});
    std::fill(down.begin(), down.end(), uint16_t{0});
    std::copy_n(gate.data_as<uint16_t>(), rows * H, gate_up.begin());
    std::copy_n(up.data_as<uint16_t>(), rows * H, gate_up.begin() + I * H);
    for (int64_t h = 0; h < H; ++h) std::copy_n(w_down.data_as<uint16_t>() + h * rows, rows, down.begin() + h * I);
    w13.upload(reinterpret_cast<const bf16*>(gate_up.data()), gate_up.size(), e * 2 * I * H);
    w2.upload(reinterpret_cast<const bf16*>(down.data()), down.size(), e * H * I);
  }
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

}  // namespace moe::cuda
