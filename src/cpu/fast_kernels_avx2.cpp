// AVX2 + FMA fallback micro-kernels of the fast CPU experts, on the same packed layout as the AVX-512 ones
// (fast_kernels.h). bf16 has no dot instruction here: a 32-bit lane holding the pair (k, k+1) of one row
// gives k+1 as fp32 by masking the low half and k by shifting left 16, so each pair costs two FMAs. int8 uses
// portable loops (no VNNI on these CPUs): correct, not fast.
#include <immintrin.h>

#include <cstdint>

#include "fast_kernels.h"
#include "core/float_convert.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace moe::cpu {

namespace {

constexpr int kPanel = 2;  // 8 of the 16 ymm registers hold one token's 64 accumulators

template <int N>
[[gnu::always_inline]] inline void dot_block_bf16(const uint16_t* w, int64_t k_pairs, const uint32_t* const* x,
                                                  float (*result)[kBlockRows]) {
  __m256 acc[8][N];
  for (int j = 0; j < 8; ++j)
    for (int n = 0; n < N; ++n) acc[j][n] = _mm256_setzero_ps();
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const char* stream = reinterpret_cast<const char*>(w);
  for (int64_t p = 0; p < k_pairs; ++p, stream += kBlockRows * 4) {
    __m256 x_lo[N], x_hi[N];
    for (int n = 0; n < N; ++n) {
      const __m256i b = _mm256_set1_epi32(static_cast<int>(x[n][p]));
      x_lo[n] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
      x_hi[n] = _mm256_castsi256_ps(_mm256_and_si256(b, high));
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(stream + 32 * j));
      const __m256 w_lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 w_hi = _mm256_castsi256_ps(_mm256_and_si256(v, high));
      for (int n = 0; n < N; ++n) acc[j][n] = _mm256_fmadd_ps(w_hi, x_hi[n], _mm256_fmadd_ps(w_lo, x_lo[n], acc[j][n]));
    }
  }
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(result[n] + 8 * j, acc[j][n]);
}

// acc[n][row] = Σ_q Σ_i (u8) x[n][q].byte[i] · w[q][row][i]
template <int N>
void dot_block_int8(const int8_t* w, int64_t k_quads, const uint32_t* const* x, int32_t (*acc)[kBlockRows]) {
  for (int n = 0; n < N; ++n)
    for (int r = 0; r < kBlockRows; ++r) acc[n][r] = 0;
  for (int64_t q = 0; q < k_quads; ++q, w += kBlockRows * 4)
    for (int n = 0; n < N; ++n) {
      const uint32_t quad = x[n][q];
      const int32_t b0 = quad & 0xff, b1 = (quad >> 8) & 0xff, b2 = (quad >> 16) & 0xff, b3 = quad >> 24;
      for (int r = 0; r < kBlockRows; ++r)
        acc[n][r] += b0 * w[4 * r] + b1 * w[4 * r + 1] + b2 * w[4 * r + 2] + b3 * w[4 * r + 3];
    }
}

void add_scaled_rows(float* out, const float* v, float weight, int valid_rows) {
  for (int r = 0; r < valid_rows && r < kBlockRows; ++r) out[r] += weight * v[r];
}

template <int N>
void gate_up_bf16(const GateUpBf16Args& a) {
  float result[N][kBlockRows];
  dot_block_bf16<N>(a.w, a.k_pairs, a.x, result);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < kGateUpCols; ++i)
      a.act[n][i] = f32_to_bf16(silu_mul_scalar(result[n][i], result[n][i + kGateUpCols]));
}

template <int N>
void down_bf16(const DownBf16Args& a) {
  float result[N][kBlockRows];
  dot_block_bf16<N>(a.w, a.k_pairs, a.x, result);
  for (int n = 0; n < N; ++n) add_scaled_rows(a.out[n], result[n], a.weight[n], a.valid_rows);
}

template <int N>
void gate_up_int8(const GateUpInt8Args& a) {
  int32_t acc[N][kBlockRows];
  dot_block_int8<N>(a.w, a.k_quads, a.x, acc);
  for (int n = 0; n < N; ++n) {
    float v[kBlockRows];
    for (int r = 0; r < kBlockRows; ++r) v[r] = float(acc[n][r] - a.w_comp[r]) * (a.w_scale[r] * a.x_scale[n]);
    for (int i = 0; i < kGateUpCols; ++i) a.act[n][i] = silu_mul_scalar(v[i], v[i + kGateUpCols]);
  }
}

template <int N>
void down_int8(const DownInt8Args& a) {
  int32_t acc[N][kBlockRows];
  dot_block_int8<N>(a.w, a.k_quads, a.x, acc);
  for (int n = 0; n < N; ++n) {
    float v[kBlockRows];
    for (int r = 0; r < kBlockRows; ++r) v[r] = float(acc[n][r] - a.w_comp[r]) * (a.w_scale[r] * a.x_scale[n]);
    add_scaled_rows(a.out[n], v, a.weight[n], a.valid_rows);
  }
}

template <class Args, void (*K1)(const Args&), void (*K2)(const Args&)>
void by_panel(const Args& a) {
  if (a.n == 1) return K1(a);
  return K2(a);
}

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable table{
      .panel = kPanel,
      .wide_panel = 0,
      .tile_panel = 0,
      .gate_up_bf16 = &by_panel<GateUpBf16Args, gate_up_bf16<1>, gate_up_bf16<2>>,
      .down_bf16 = &by_panel<DownBf16Args, down_bf16<1>, down_bf16<2>>,
      .gate_up_int8 = &by_panel<GateUpInt8Args, gate_up_int8<1>, gate_up_int8<2>>,
      .down_int8 = &by_panel<DownInt8Args, down_int8<1>, down_int8<2>>,
  };
  return table;
}

}  // namespace moe::cpu

#pragma GCC pop_options
