// The kernels of linear_kernels.h on AVX2 + FMA + F16C: 8 fp32 lanes; dot tiles of 2 weight rows × 4 token
// rows and axpy tiles of 2 vectors × 4 rows (8 accumulators of the 16 registers).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "linear_kernels.h"
#include "moe/core/check.h"
#include "core/float_convert.h"

// NOTE: only the dispatcher (linear_kernels.cpp) calls into this file, after checking cpuid.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "linear_kernels_body.h"

namespace moe::cpu {

namespace {

using kernels::Bf16;
using kernels::F16;

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8, kRows = 2, kPanel = 4, kCols = 2;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const Bf16* p) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  static V load(const F16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V broadcast(float v) { return _mm256_set1_ps(v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(V v) {
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};

}  // namespace

void dot_rows_avx2(const DotTask& task, int64_t o0, int64_t o1) {
  kernels::dot_rows_impl<Avx2>(task, o0, o1);
}
void axpy_rows_avx2(const AxpyTask& task, int64_t o0, int64_t o1) {
  kernels::axpy_rows_impl<Avx2>(task, o0, o1);
}

}  // namespace moe::cpu

#pragma GCC pop_options
