// Router logits with the reference's precision (fp64 accumulation, one rounding), but blocked 4 tokens ×
// 4 experts so each loaded row is used four times, and compiled for the widest vector unit present.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "cpu/fast_experts.h"

namespace moe::cpu {

namespace {

constexpr int kBlock = 4;
constexpr int kLanes = 8;

// NOTE: target_clones dispatches through an ifunc resolver that the loader runs before ThreadSanitizer's
// runtime is up, which crashes an instrumented binary at start: TSan builds (-DMOE_SANITIZE=thread) take the
// generic version.
#if defined(__SANITIZE_THREAD__)
#define MOE_TARGET_CLONES(...)
#else
#define MOE_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#endif

// out[t][e] for nt <= 4 tokens and ne <= 4 experts; x rows and w rows have H floats.
// NOTE: the lane loop is what the compiler vectorises (8 doubles: one zmm, or two ymm).
MOE_TARGET_CLONES("arch=haswell", "default") void dot_block_f64(
    const float* const* x, int nt, const float* const* w, int ne, int64_t H, double (*out)[kBlock]) {
  double acc[kBlock][kBlock][kLanes] = {};
  int64_t h = 0;
  for (; h + kLanes <= H; h += kLanes)
    for (int t = 0; t < kBlock; ++t)
      for (int e = 0; e < kBlock; ++e)
        for (int l = 0; l < kLanes; ++l) acc[t][e][l] += double{x[t][h + l]} * double{w[e][h + l]};
  for (int t = 0; t < kBlock; ++t)
    for (int e = 0; e < kBlock; ++e) {
      double sum = 0;
      for (int64_t i = h; i < H; ++i) sum += double{x[t][i]} * double{w[e][i]};
      for (int l = 0; l < kLanes; ++l) sum += acc[t][e][l];
      out[t][e] = sum;
    }
  (void)nt;
  (void)ne;
}

// The same with AVX-512 intrinsics: the 16 accumulators of 8 doubles stay in registers (the compiler keeps
// the generic version's accumulator array in memory).
// NOTE: a target attribute on each AVX-512 function, not `#pragma GCC target`: clang ignores the pragma, and
// the clang builds then compile the whole file for AVX-512 (cmake/sanitizers.cmake), generic code included,
// which crashed the fuzz build on a CPU without it (an AVX2-only AMD EPYC).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void dot_block_f64_avx512(const float* const* x, const float* const* w, int64_t H, double (*out)[kBlock]) {
  __m512d acc[kBlock][kBlock];
  for (int t = 0; t < kBlock; ++t)
    for (int e = 0; e < kBlock; ++e) acc[t][e] = _mm512_setzero_pd();
  int64_t h = 0;
  for (; h + kLanes <= H; h += kLanes) {
    __m512d xv[kBlock], wv[kBlock];
#pragma GCC unroll 4
    for (int i = 0; i < kBlock; ++i) {
      xv[i] = _mm512_cvtps_pd(_mm256_loadu_ps(x[i] + h));
      wv[i] = _mm512_cvtps_pd(_mm256_loadu_ps(w[i] + h));
    }
#pragma GCC unroll 4
    for (int t = 0; t < kBlock; ++t)
#pragma GCC unroll 4
      for (int e = 0; e < kBlock; ++e) acc[t][e] = _mm512_fmadd_pd(xv[t], wv[e], acc[t][e]);
  }
  for (int t = 0; t < kBlock; ++t)
    for (int e = 0; e < kBlock; ++e) {
      double sum = 0;
      for (int64_t i = h; i < H; ++i) sum += double{x[t][i]} * double{w[e][i]};
      out[t][e] = sum + _mm512_reduce_add_pd(acc[t][e]);
    }
}

// One token against four experts (a block of a single token: T = 1, decode), with the arithmetic of
// dot_block_f64_avx512 for each (token, expert), so the logits are bit-identical to the 4-token path's; the
// padded block would do four times the multiplies for one token's results.
__attribute__((target("avx512f"))) void dot_row_f64_avx512(const float* x, const float* const* w, int64_t H, double* out) {
  __m512d acc[kBlock];
  for (int e = 0; e < kBlock; ++e) acc[e] = _mm512_setzero_pd();
  int64_t h = 0;
  for (; h + kLanes <= H; h += kLanes) {
    const __m512d xv = _mm512_cvtps_pd(_mm256_loadu_ps(x + h));
#pragma GCC unroll 4
    for (int e = 0; e < kBlock; ++e) acc[e] = _mm512_fmadd_pd(xv, _mm512_cvtps_pd(_mm256_loadu_ps(w[e] + h)), acc[e]);
  }
  for (int e = 0; e < kBlock; ++e) {
    double sum = 0;
    for (int64_t i = h; i < H; ++i) sum += double{x[i]} * double{w[e][i]};
    out[e] = sum + _mm512_reduce_add_pd(acc[e]);
  }
}
#pragma GCC diagnostic pop

bool has_avx512f() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

Tensor router_logits_fast(const Tensor& x, const Tensor& gate_weight) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous(), "router expects contiguous F32 x [T, H]");
  const int64_t T = x.size(0), H = x.size(1);
  MOE_CHECK(gate_weight.dim() == 2 && gate_weight.size(1) == H && gate_weight.dtype() == DType::F32 &&
                gate_weight.is_contiguous(),
            "fast router expects a contiguous F32 gate weight [E, {}], got {} {}", H, dtype_name(gate_weight.dtype()),
            gate_weight.shape_string());
  const int64_t E = gate_weight.size(0);
  Tensor logits = Tensor::empty(DType::F32, {T, E});  // [T, E]
  const float* xs = x.data_as<float>();
  const float* ws = gate_weight.data_as<float>();
  float* out = logits.data_as<float>();
  static const bool avx512 = has_avx512f();
  const int64_t t_blocks = (T + kBlock - 1) / kBlock, e_blocks = (E + kBlock - 1) / kBlock;
  // NOTE: padding rows of a partial block repeat the last real row; their results are discarded.
  ThreadPool::global().parallel_for(t_blocks * e_blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b / e_blocks * kBlock, e0 = b % e_blocks * kBlock;
      const int nt = static_cast<int>(std::min<int64_t>(kBlock, T - t0));
      const int ne = static_cast<int>(std::min<int64_t>(kBlock, E - e0));
      const float* xr[kBlock];
      const float* wr[kBlock];
      for (int i = 0; i < kBlock; ++i) {
        xr[i] = xs + (t0 + std::min(i, nt - 1)) * H;
        wr[i] = ws + (e0 + std::min(i, ne - 1)) * H;
      }
      double result[kBlock][kBlock];
      if (avx512 && nt == 1)
        dot_row_f64_avx512(xr[0], wr, H, result[0]);
      else if (avx512)
        dot_block_f64_avx512(xr, wr, H, result);
      else
        dot_block_f64(xr, nt, wr, ne, H, result);
      for (int t = 0; t < nt; ++t)
        for (int e = 0; e < ne; ++e) out[(t0 + t) * E + e0 + e] = static_cast<float>(result[t][e]);
    }
  });
  return logits;
}

}  // namespace moe::cpu
