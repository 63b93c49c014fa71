#pragma once
// Reference dot products: fp32 inputs, fp64 accumulation in independent lanes (which the compiler
// vectorises), one rounding at the end by the caller.

#include <cstdint>

#include "core/float_convert.h"
#include "moe/core/tensor.h"

namespace moe::cpu {

inline double dot_f64(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += double{a[i + l]} * double{b[i + l]};
  double sum = 0.0;
  for (; i < n; ++i) sum += double{a[i]} * double{b[i]};
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

// Row r of a 2-D weight of any float dtype, converted into `out` (cols floats). The row must be contiguous.
inline void weight_row_f32(const Tensor& w, int64_t r, float* out) {
  const int64_t cols = w.size(1);
  const char* base = static_cast<const char*>(w.data()) + r * w.strides()[0] * int64_t(dtype_size(w.dtype()));
  convert_to_f32(base, w.dtype(), out, static_cast<size_t>(cols));
}

}  // namespace moe::cpu
