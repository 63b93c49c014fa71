#pragma once
// The AVX-512 epilogues of the fast CPU experts' micro-kernels (SwiGLU, the weighted add into a token's
// output, int8 dequantisation), shared by the vdpbf16ps kernels (fast_kernels_avx512.cpp) and the AMX ones
// (fast_kernels_amx.cpp). Include it after `#pragma GCC target` enables AVX-512 (F, DQ) and FMA: everything
// here is compiled for that target, and only kernels chosen after a cpuid check call it.
#include <immintrin.h>

#include "fast_kernels.h"

namespace moe::cpu {
namespace {

constexpr int kTiles = kBlockRows / 16;  // 16-row tiles of a block: one 512-bit register of fp32 each

// exp(x) for silu: Cody-Waite reduction by ln 2, degree-6 Taylor on [-ln2/2, ln2/2] (relative error ~2e-7),
// 2^n applied with scalef (which saturates to 0 / inf without integer tricks).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-100.0f)), _mm512_set1_ps(100.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.4426950409f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// silu(g) * u = g * u / (1 + exp(-g))
inline __m512 silu_mul_ps(__m512 g, __m512 u) {
  const __m512 denominator =
      _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g)));
  return _mm512_div_ps(_mm512_mul_ps(g, u), denominator);
}

// out[16r + j] += weight · v[r][j] over the block's first valid_rows rows.
inline void add_scaled_rows(float* out, const __m512 (&v)[kTiles], float weight, int valid_rows) {
  const __m512 w = _mm512_set1_ps(weight);
#pragma GCC unroll 8
  for (int r = 0; r < kTiles; ++r) {
    const int valid = valid_rows - 16 * r;
    if (valid >= 16) {
      _mm512_storeu_ps(out + 16 * r, _mm512_fmadd_ps(w, v[r], _mm512_loadu_ps(out + 16 * r)));
    } else if (valid > 0) {
      const __mmask16 m = static_cast<__mmask16>((1u << valid) - 1);
      _mm512_mask_storeu_ps(out + 16 * r, m,
                            _mm512_fmadd_ps(w, v[r], _mm512_maskz_loadu_ps(m, out + 16 * r)));
    }
  }
}

// (acc - comp) · w_scale · x_scale for tile r
inline __m512 dequant(__m512i acc, const float* w_scale, const int32_t* w_comp, int r, float x_scale) {
  const __m512i centred = _mm512_sub_epi32(acc, _mm512_loadu_si512(w_comp + 16 * r));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(centred),
                       _mm512_mul_ps(_mm512_loadu_ps(w_scale + 16 * r), _mm512_set1_ps(x_scale)));
}

}  // namespace
}  // namespace moe::cpu
