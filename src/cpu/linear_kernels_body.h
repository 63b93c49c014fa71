#pragma once
// The body of linear_kernels.h, written once over an `Ops` struct of one ISA and included by
// linear_kernels_<isa>.cpp under that ISA's target pragma. Ops provides:
//   V, kLanes, kRows and kPanel (the dot tile), kCols (axpy vectors per tile),
//   zero(), load(const float*), load(const Bf16*), load(const F16*), broadcast(float), fma(a, b, c) = a·b +
//   c, sum(V) (horizontal), store(float*, V).
// Partial vectors (k or o not a multiple of kLanes) finish in scalar code.
// NOTE: everything here sits in an anonymous namespace, so that each ISA's file keeps its own copy: an
// inline function shared between files could otherwise be linked in its AVX-512 build on a CPU without.
// Include every header this one needs before the target pragma (linear_kernels_avx512.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "linear_kernels.h"
#include "moe/core/check.h"
#include "core/float_convert.h"

namespace moe::cpu::kernels {
namespace {

// Tag types so that the loads of BF16 and F16 rows overload on the pointer type.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
inline float to_f32(float v) {
  return v;
}
inline float to_f32(Bf16 v) {
  return bf16_to_f32(v.bits);
}
inline float to_f32(F16 v) {
  return f16_to_f32(v.bits);
}

// Token rows per block: the block's activations (64 · k floats, 512 KiB at k = 2048) stay in L2 while
// every weight row of a thread's range passes over them, so each weight row is read once per block.
inline constexpr int64_t kTokenBlock = 64;

// y[n][o + r] = Σ_k x[n][k] · w[o + r][k] for r < R, n < N: R·N independent accumulators. `ahead`, when
// set, is the next tile's first row: its rows are prefetched in step with this tile's stream.
template <class Ops, class W, int R, int N>
[[gnu::always_inline]] inline void dot_tile(const W* w, int64_t w_stride, const float* const* x,
                                            int64_t k_len, float* const* y, int64_t o, const W* ahead) {
  using V = typename Ops::V;
  V acc[R][N];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) acc[r][n] = Ops::zero();
  int64_t k = 0;
  for (; k + Ops::kLanes <= k_len; k += Ops::kLanes) {
    if (ahead)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) __builtin_prefetch(ahead + r * w_stride + k);
    V wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = Ops::load(w + r * w_stride + k);
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) {
      const V xv = Ops::load(x[n] + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][n] = Ops::fma(wv[r], xv, acc[r][n]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) {
      float s = Ops::sum(acc[r][n]);
      for (int64_t kk = k; kk < k_len; ++kk) s += to_f32(w[r * w_stride + kk]) * x[n][kk];
      y[n][o + r] = s;
    }
}

// One weight tile of R rows against every token of [t0, t1), in panels of Ops::kPanel. The first panel
// prefetches the next tile (`ahead`, or null at the end of the range).
// NOTE: a weight row of 2048 BF16 values is one 4 KiB page of the mapped checkpoint, and the hardware
// prefetchers stop at page boundaries: without this every row would start with a full DRAM latency.
template <class Ops, class W, int R, int... Ns>
void dot_panels(const W* w, int64_t w_stride, const DotTask& t, int64_t t0, int64_t t1, int64_t o,
                const W* ahead, std::integer_sequence<int, Ns...>) {
  constexpr int N = Ops::kPanel;
  int64_t i = t0;
  for (; i + N <= t1; i += N, ahead = nullptr) dot_tile<Ops, W, R, N>(w, w_stride, t.x + i, t.k, t.y + i, o, ahead);
  const int64_t rest = t1 - i;
  ((rest == Ns + 1 ? dot_tile<Ops, W, R, Ns + 1>(w, w_stride, t.x + i, t.k, t.y + i, o, ahead) : void()), ...);
}

template <class Ops, class W>
void dot_rows_typed(const DotTask& t, int64_t o0, int64_t o1) {
  const W* w = static_cast<const W*>(t.w);
  constexpr int R = Ops::kRows;
  const auto tails = std::make_integer_sequence<int, Ops::kPanel - 1>{};
  for (int64_t t0 = 0; t0 < t.n; t0 += kTokenBlock) {
    const int64_t t1 = std::min(t.n, t0 + kTokenBlock);
    int64_t o = o0;
    for (; o + R <= o1; o += R) {
      const W* ahead = o + 2 * R <= o1 ? w + (o + R) * t.w_stride : nullptr;
      dot_panels<Ops, W, R>(w + o * t.w_stride, t.w_stride, t, t0, t1, o, ahead, tails);
    }
    for (; o < o1; ++o) dot_panels<Ops, W, 1>(w + o * t.w_stride, t.w_stride, t, t0, t1, o, nullptr, tails);
  }
}

template <class Ops>
void dot_rows_impl(const DotTask& t, int64_t o0, int64_t o1) {
  switch (t.w_dtype) {
    case DType::F32:
      return dot_rows_typed<Ops, float>(t, o0, o1);
    case DType::BF16:
      return dot_rows_typed<Ops, Bf16>(t, o0, o1);
    case DType::F16:
      return dot_rows_typed<Ops, F16>(t, o0, o1);
    default:
      MOE_FAIL("dot_rows: weights must be F32, BF16 or F16, got {}", dtype_name(t.w_dtype));
  }
}

// y[n][o + c·kLanes ...] = Σ_j a[n][j] · w[j][o + c·kLanes ...] for C full vectors of columns, N rows.
template <class Ops, class W, int C, int N>
[[gnu::always_inline]] inline void axpy_tile(const W* w, int64_t w_stride, const float* const* a,
                                             int64_t j_len, float* const* y, int64_t o, bool accumulate) {
  using V = typename Ops::V;
  V acc[C][N];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) acc[c][n] = accumulate ? Ops::load(y[n] + o + c * Ops::kLanes) : Ops::zero();
  for (int64_t j = 0; j < j_len; ++j) {
    V wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) wv[c] = Ops::load(w + j * w_stride + o + c * Ops::kLanes);
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) {
      const V b = Ops::broadcast(a[n][j]);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[c][n] = Ops::fma(wv[c], b, acc[c][n]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) Ops::store(y[n] + o + c * Ops::kLanes, acc[c][n]);
}

template <class Ops, class W, int C, int... Ns>
void axpy_panels(const W* w, const AxpyTask& t, int64_t o, std::integer_sequence<int, Ns...>) {
  constexpr int N = Ops::kPanel;
  int64_t i = 0;
  for (; i + N <= t.n; i += N) axpy_tile<Ops, W, C, N>(w, t.w_stride, t.a + i, t.j, t.y + i, o, t.accumulate);
  const int64_t rest = t.n - i;
  ((rest == Ns + 1 ? axpy_tile<Ops, W, C, Ns + 1>(w, t.w_stride, t.a + i, t.j, t.y + i, o, t.accumulate) : void()),
   ...);
}

template <class Ops, class W>
void axpy_rows_typed(const AxpyTask& t, int64_t o0, int64_t o1) {
  const W* w = static_cast<const W*>(t.w);
  constexpr int64_t kTile = int64_t{Ops::kCols} * Ops::kLanes;
  const auto tails = std::make_integer_sequence<int, Ops::kPanel - 1>{};
  int64_t o = o0;
  for (; o + kTile <= o1; o += kTile) axpy_panels<Ops, W, Ops::kCols>(w, t, o, tails);
  for (; o + Ops::kLanes <= o1; o += Ops::kLanes) axpy_panels<Ops, W, 1>(w, t, o, tails);
  // NOTE: the columns short of a vector sum with explicit fmas, as the vectors do: left to the compiler,
  // `s += a * w` contracts in some unrolled iterations and not others, and a sum split over j would differ
  // from the whole one.
  for (; o < o1; ++o)
    for (int64_t n = 0; n < t.n; ++n) {
      float s = t.accumulate ? t.y[n][o] : 0.0f;
      for (int64_t j = 0; j < t.j; ++j) s = std::fma(t.a[n][j], to_f32(w[j * t.w_stride + o]), s);
      t.y[n][o] = s;
    }
}

template <class Ops>
void axpy_rows_impl(const AxpyTask& t, int64_t o0, int64_t o1) {
  switch (t.w_dtype) {
    case DType::F32:
      return axpy_rows_typed<Ops, float>(t, o0, o1);
    case DType::BF16:
      return axpy_rows_typed<Ops, Bf16>(t, o0, o1);
    case DType::F16:
      return axpy_rows_typed<Ops, F16>(t, o0, o1);
    default:
      MOE_FAIL("axpy_rows: weights must be F32, BF16 or F16, got {}", dtype_name(t.w_dtype));
  }
}

}  // namespace
}  // namespace moe::cpu::kernels
