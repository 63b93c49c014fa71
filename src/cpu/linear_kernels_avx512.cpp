// The kernels of linear_kernels.h on AVX-512F: 16 fp32 lanes; dot tiles of 4 weight rows × 6 token rows
// and axpy tiles of 4 vectors × 6 rows (24 accumulators of the 32 registers, so that the FMA latency
// hides behind independent chains). BF16 rows widen by a shift, F16 rows by vcvtph2ps.
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
// NOTE: GCC 12's AVX-512 intrinsics start from _mm512_undefined_*, which -Wuninitialized misreports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,fma,f16c")

#include "linear_kernels_body.h"

namespace moe::cpu {

namespace {

using kernels::Bf16;
using kernels::F16;

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16, kRows = 4, kPanel = 6, kCols = 4;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const Bf16* p) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static V load(const F16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V broadcast(float v) { return _mm512_set1_ps(v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
};

}  // namespace

void dot_rows_avx512(const DotTask& task, int64_t o0, int64_t o1) {
  kernels::dot_rows_impl<Avx512>(task, o0, o1);
}
void axpy_rows_avx512(const AxpyTask& task, int64_t o0, int64_t o1) {
  kernels::axpy_rows_impl<Avx512>(task, o0, o1);
}

}  // namespace moe::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
