// The portable build of linear_kernels.h (any CPU: one lane, the same tiles) and the ISA dispatch.
#include "linear_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "linear_kernels_body.h"
#include "core/knobs.h"

namespace moe::cpu {

namespace {

using kernels::Bf16;
using kernels::F16;

struct Scalar {
  using V = float;
  static constexpr int kLanes = 1, kRows = 2, kPanel = 4, kCols = 4;
  static V zero() { return 0.0f; }
  static V load(const float* p) { return *p; }
  static V load(const Bf16* p) { return kernels::to_f32(*p); }
  static V load(const F16* p) { return kernels::to_f32(*p); }
  static V broadcast(float v) { return v; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static float sum(V v) { return v; }
  static void store(float* p, V v) { *p = v; }
};

LinearIsa detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // NOTE: read once, at the first linear (linear_isa caches the answer), as the experts' ISA is read at set-up.
  if (Knobs::from_env().cpu_isa == Knobs::CpuIsa::avx2 && avx2) return LinearIsa::avx2;
  if (__builtin_cpu_supports("avx512f") && avx2) return LinearIsa::avx512;
  return avx2 ? LinearIsa::avx2 : LinearIsa::scalar;
}

}  // namespace

LinearIsa linear_isa() {
  static const LinearIsa isa = detect();
  return isa;
}

void dot_rows_scalar(const DotTask& task, int64_t o0, int64_t o1) {
  kernels::dot_rows_impl<Scalar>(task, o0, o1);
}
void axpy_rows_scalar(const AxpyTask& task, int64_t o0, int64_t o1) {
  kernels::axpy_rows_impl<Scalar>(task, o0, o1);
}

void dot_rows(LinearIsa isa, const DotTask& task, int64_t o0, int64_t o1) {
  switch (isa) {
    case LinearIsa::avx512:
      return dot_rows_avx512(task, o0, o1);
    case LinearIsa::avx2:
      return dot_rows_avx2(task, o0, o1);
    case LinearIsa::scalar:
      return dot_rows_scalar(task, o0, o1);
  }
}

void axpy_rows(LinearIsa isa, const AxpyTask& task, int64_t o0, int64_t o1) {
  switch (isa) {
    case LinearIsa::avx512:
      return axpy_rows_avx512(task, o0, o1);
    case LinearIsa::avx2:
      return axpy_rows_avx2(task, o0, o1);
    case LinearIsa::scalar:
      return axpy_rows_scalar(task, o0, o1);
  }
}

}  // namespace moe::cpu
