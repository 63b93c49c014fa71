#include "cpu/rms_norm.h"

#include <cmath>
#include <cstring>

namespace moe::cpu {

namespace {

// rows of `width` floats, `stride` apart, normalised in place.
void normalise(float* p, int64_t rows, int64_t stride, int64_t width, const float* w, double eps) {
  for (int64_t g = 0; g < rows; ++g) {
    float* row = p + g * stride;
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += double{row[i]} * double{row[i]};
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / double(width) + eps));
    for (int64_t i = 0; i < width; ++i) row[i] = w[i] * (row[i] * inv);
  }
}

}  // namespace

void rms_norm(Tensor& x, const Tensor& weight, double eps, int64_t width) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous() && width > 0 && x.size(1) % width == 0,
            "rms_norm: rows of width {} do not split into groups of {}", x.size(1), width);
  MOE_CHECK(weight.dtype() == DType::F32 && weight.numel() == width, "rms_norm: weight must be [{}] F32", width);
  normalise(x.data_as<float>(), x.numel() / width, width, width, weight.data_as<float>(), eps);
}

void rms_norm_prefix(Tensor& x, const Tensor& weight, double eps, int64_t width) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous() && width > 0 && x.size(1) >= width,
            "rms_norm: rows of width {} have no prefix of {}", x.size(1), width);
  MOE_CHECK(weight.dtype() == DType::F32 && weight.numel() == width, "rms_norm: weight must be [{}] F32", width);
  normalise(x.data_as<float>(), x.size(0), x.size(1), width, weight.data_as<float>(), eps);
}

Tensor add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, double eps) {
  MOE_CHECK(residual.dim() == 2 && residual.dtype() == DType::F32 && residual.is_contiguous(),
            "add_rms_norm expects contiguous F32 rows, got {}", residual.shape_string());
  if (delta.defined()) {
    MOE_CHECK(residual.shape() == delta.shape() && delta.dtype() == DType::F32 && delta.is_contiguous(),
              "add: shapes {} and {}", residual.shape_string(), delta.shape_string());
    float* p = residual.data_as<float>();
    const float* q = delta.data_as<float>();
    for (int64_t i = 0; i < residual.numel(); ++i) p[i] += q[i];
  }
  Tensor out = Tensor::empty(DType::F32, residual.shape());  // [T, H]
  std::memcpy(out.data(), residual.data(), residual.nbytes());
  rms_norm(out, weight, eps, out.size(1));
  return out;
}

}  // namespace moe::cpu
