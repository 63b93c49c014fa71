#include "core/float_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moe/core/check.h"

namespace moe {

void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n) {
  switch (src_dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::F8_E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(static_cast<const uint8_t*>(src)[i]);
      return;
    default:
      MOE_FAIL("cannot convert {} to F32: not a float dtype", dtype_name(src_dtype));
  }
}

void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n) {
  switch (dst_dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return;
    case DType::F8_E4M3:
      for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = f32_to_fp8_e4m3(src[i]);
      return;
    default:
      MOE_FAIL("cannot convert F32 to {}: not a float dtype", dtype_name(dst_dtype));
  }
}

int split_bf16_terms(const float* w, size_t n, std::vector<uint16_t>& terms) {
  constexpr int kMaxTerms = 3;
  terms.assign(kMaxTerms * n, 0);
  int used = 0;
  for (size_t i = 0; i < n; ++i) {
    float rest = w[i];
    for (int j = 0; j < kMaxTerms; ++j) {
      uint16_t term = f32_to_bf16(rest);
      if (!std::isfinite(rest)) {  // only ever the first term
        terms[j * n + i] = term;
        used = std::max(used, 1);
        break;
      }
      // Finite values past bf16's largest round to inf; that largest value instead leaves a finite rest.
      if (!std::isfinite(bf16_to_f32(term))) term = static_cast<uint16_t>((term & 0x8000u) | 0x7f7fu);
      if (j > 0 && bf16_to_f32(term) == 0.0f) break;  // a rest below bf16's smallest subnormal: lost anyway
      terms[j * n + i] = term;
      used = std::max(used, j + 1);
      // Exact: the term is rest rounded to fewer bits, so the difference is a multiple of rest's ulp.
      rest -= bf16_to_f32(term);
      if (rest == 0.0f) break;
    }
  }
  terms.resize(used * n);
  return used;
}

}  // namespace moe
