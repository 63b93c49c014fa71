#pragma once
// Scalar conversions between fp32 and the narrow float formats, all round-to-nearest-even, and bulk
// conversions of whole buffers. Semantics follow PyTorch's casts:
//   bf16: NaN stays a quiet NaN, overflow rounds to inf.
//   fp16: IEEE binary16 with subnormals, overflow (>= 65520) to inf.
//   fp8 e4m3 ("fn": no inf, max 448, NaN = S.1111.111): |x| >= 480 and NaN give NaN; callers that
//   quantise clamp to +-448 first, as every fp8 recipe does.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "moe/core/dtype.h"

namespace moe {

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

inline uint16_t f32_to_bf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding_bias) >> 16);
}

inline float f16_to_f32(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t f32_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);  // NaN, kept quiet
  if (ax >= 0x477ff000u) return sign | 0x7c00u;                         // >= 65520 rounds to inf
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal in units of 2^-24 (exact scaling, then RNE)
    const float units = std::bit_cast<float>(ax) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(units));
  }
  const uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

inline float fp8_e4m3_to_f32(uint8_t bits) {
  const uint32_t sign = uint32_t{bits & 0x80u} << 24;
  const uint32_t exponent = (bits >> 3) & 0xfu, mantissa = bits & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);  // NaN
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-9, exact in fp32
    return std::bit_cast<float>(std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 0x1.0p-9f) | sign);
  }
  // NOTE: bit placement, not ldexp: this runs per value in the fp8 dispatch of expert parallelism.
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

inline uint8_t f32_to_fp8_e4m3(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x43f00000u) return sign | 0x7fu;  // NaN, inf and |x| >= 480
  if (ax < 0x3c800000u) {                      // below 2^-6: a subnormal in units of 2^-9
    const float units = std::bit_cast<float>(ax) * 512.0f;
    return sign | static_cast<uint8_t>(std::nearbyint(units));
  }
  const uint32_t rounded = ax + 0x7ffffu + ((ax >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded - (120u << 23)) >> 20);
}

// dst[i] = float(src[i]) for n elements of a float dtype (F32, BF16, F16, F8_E4M3).
void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n);
// dst[i] = src[i] rounded to a float dtype.
void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n);

// w as a sum of bf16 terms: terms[j * n + i] is term j of w[i]; term 0 is bf16(w), each next term bf16 of
// what the terms before leave. Returns how many terms were needed (1 to 3) for every finite w[i] to be their
// exact sum: 1 when w is bf16 already, 3 at most (3 x 8 significant bits hold fp32's 24; only residuals
// below bf16's smallest subnormal, 2^-133, are lost). Non-finite values are term 0 alone. `terms` holds
// exactly that many terms of n values. What it is for: products of bf16 activations with bf16 terms are
// exact in fp32, so a bf16 tensor-core GEMM per term gives an fp32 weight's products (CUDA router).
int split_bf16_terms(const float* w, size_t n, std::vector<uint16_t>& terms);

}  // namespace moe
