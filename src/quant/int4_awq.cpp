#include "quant/int4_awq.h"

#include <algorithm>
#include <cmath>

#include "core/float_convert.h"
#include "core/thread_pool.h"

namespace moe::quant {

namespace {

constexpr int kPack = 8;          // 4-bit values per int32
constexpr float kMaxQ = 15.0f;    // 2^4 - 1
constexpr float kMinRange = 1e-5f;  // AutoAWQ's clamp of max - min

}  // namespace

uint32_t awq_pack8(const std::array<uint8_t, 8>& v) {
  uint32_t packed = 0;
  for (int i = 0; i < kPack; ++i) packed |= uint32_t{v[kAwqPackOrder[i]] & 0xfu} << (4 * i);
  return packed;
}

uint8_t awq_unpack(uint32_t packed, int j) { return static_cast<uint8_t>((packed >> (4 * kAwqUnpackNibble[j])) & 0xfu); }

AwqInt4Weight quantize_awq_int4(const Tensor& w, int64_t group_size) {
  MOE_CHECK(w.dim() == 2 && dtype_is_float(w.dtype()), "int4 quantisation needs a float [N, K] weight, got {} {}",
            dtype_name(w.dtype()), w.shape_string());
  const int64_t N = w.size(0), K = w.size(1), G = group_size;
  MOE_CHECK(G > 0 && K % G == 0, "int4 group size {} must divide the weight's {} inputs (shape {}): choose a group "
            "size that divides every expert's input sizes", G, K, w.shape_string());
  MOE_CHECK(N % kPack == 0, "int4 (AWQ GEMM) packs 8 outputs per int32: the weight's {} outputs (shape {}) are not a "
            "multiple of 8", N, w.shape_string());
  const Tensor src = w.to_f32();
  const float* x = src.data_as<float>();
  const int64_t groups = K / G;
  std::vector<uint8_t> q(static_cast<size_t>(N * K)), zero(static_cast<size_t>(N * groups));  // [N, K], [N, groups]
  AwqInt4Weight out{.qweight = Tensor::empty(DType::I32, {K, N / kPack}),
                    .qzeros = Tensor::empty(DType::I32, {groups, N / kPack}),
                    .scales = Tensor::empty(DType::F16, {groups, N})};
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = x + n * K + g * G;
      const auto [lo, hi] = std::minmax_element(v, v + G);
      MOE_CHECK(std::isfinite(*lo) && std::isfinite(*hi), "cannot quantise a weight with a non-finite value (output {})", n);
      // NOTE: the scale is rounded to f16 before use, so that dequantising the stored f16 gives what was meant.
      const uint16_t scale_bits = f32_to_f16(std::max(*hi - *lo, kMinRange) / kMaxQ);
      const float scale = f16_to_f32(scale_bits);
      const float z = std::clamp(std::nearbyint(-*lo / scale), 0.0f, kMaxQ);
      out.scales.data_as<uint16_t>()[g * N + n] = scale_bits;
      zero[n * groups + g] = static_cast<uint8_t>(z);
      for (int64_t i = 0; i < G; ++i)
        q[n * K + g * G + i] = static_cast<uint8_t>(std::clamp(std::nearbyint(v[i] / scale) + z, 0.0f, kMaxQ));
    }
  }
  std::array<uint8_t, 8> eight{};
  for (int64_t c = 0; c < N / kPack; ++c) {
    for (int64_t k = 0; k < K; ++k) {
      for (int j = 0; j < kPack; ++j) eight[j] = q[(c * kPack + j) * K + k];
      out.qweight.data_as<int32_t>()[k * (N / kPack) + c] = static_cast<int32_t>(awq_pack8(eight));
    }
    for (int64_t g = 0; g < groups; ++g) {
      for (int j = 0; j < kPack; ++j) eight[j] = zero[(c * kPack + j) * groups + g];
      out.qzeros.data_as<int32_t>()[g * (N / kPack) + c] = static_cast<int32_t>(awq_pack8(eight));
    }
  }
  return out;
}

void check_awq_int4(const AwqInt4Weight& w, int64_t group_size, const std::string& module) {
  MOE_CHECK(group_size > 0, "awq group_size {} must be positive", group_size);
  MOE_CHECK(w.qweight.dtype() == DType::I32 && w.qweight.dim() == 2, "tensor '{}.qweight' is {} {}: expected I32 "
            "[in_features, out_features / 8]", module, dtype_name(w.qweight.dtype()), w.qweight.shape_string());
  const int64_t K = w.qweight.size(0), N = w.qweight.size(1) * kPack;
  MOE_CHECK(K % group_size == 0, "'{}.qweight' has {} inputs, not a multiple of quantization_config.group_size {} "
            "(does the group size match the checkpoint?)", module, K, group_size);
  const std::vector<int64_t> zeros_shape{K / group_size, N / kPack}, scales_shape{K / group_size, N};
  MOE_CHECK(w.qzeros.dtype() == DType::I32 && w.qzeros.shape() == zeros_shape, "tensor '{}.qzeros' is {} {}, expected "
            "I32 {} (group_size {})", module, dtype_name(w.qzeros.dtype()), w.qzeros.shape_string(),
            shape_to_string(zeros_shape), group_size);
  MOE_CHECK(dtype_is_float(w.scales.dtype()) && w.scales.shape() == scales_shape, "tensor '{}.scales' is {} {}, "
            "expected F16 {} (group_size {}: does it match the checkpoint?)", module, dtype_name(w.scales.dtype()),
            w.scales.shape_string(), shape_to_string(scales_shape), group_size);
  const Tensor s = w.scales.to_f32();
  for (int64_t i = 0; i < s.numel(); ++i) {
    const float v = s.data_as<float>()[i];
    MOE_CHECK(std::isfinite(v) && v > 0, "tensor '{}.scales' holds {} at flat index {}: every group scale must be "
              "finite and > 0 (a corrupt or wrongly converted checkpoint)", module, v, i);
  }
}

Tensor dequantize_awq_int4(const AwqInt4Weight& w, int64_t group_size, DType out, const std::string& module) {
  check_awq_int4(w, group_size, module);
  MOE_CHECK(out == DType::F32 || out == DType::BF16, "int4 weights dequantise to F32 or BF16, not {}", dtype_name(out));
  const Tensor qweight = w.qweight.to(DType::I32), qzeros = w.qzeros.to(DType::I32), scales = w.scales.to_f32();
  const int64_t K = qweight.size(0), cols = qweight.size(1), N = cols * kPack, G = group_size;
  Tensor result = Tensor::empty(out, {N, K});
  // NOTE: in parallel over outputs, as the fp8 dequantisation (whole checkpoints go through here at load).
  const auto* packed = reinterpret_cast<const uint32_t*>(qweight.data_as<int32_t>());
  const auto* zeros = reinterpret_cast<const uint32_t*>(qzeros.data_as<int32_t>());
  const float* scale = scales.data_as<float>();
  ThreadPool::global().parallel_for(N, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t n = begin; n < end; ++n) {
      const int64_t c = n / kPack;
      const int j = static_cast<int>(n % kPack);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t g = k / G;
        const auto q = static_cast<float>(awq_unpack(packed[k * cols + c], j));
        const auto z = static_cast<float>(awq_unpack(zeros[g * cols + c], j));
        row[k] = (q - z) * scale[g * N + n];
      }
      if (out == DType::F32) std::copy(row.begin(), row.end(), result.data_as<float>() + n * K);
      else convert_from_f32(row.data(), result.data_as<uint16_t>() + n * K, DType::BF16, K);
    }
  });
  return result;
}

}  // namespace moe::quant
