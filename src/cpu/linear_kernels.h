#pragma once
// The vectorised products under the dense ops (linear.h) and attention (attention.h), fp32 multiply-add on weights read in
// their checkpoint dtype (F32, BF16 or F16: converted in registers, never copied). Two shapes:
//   dot:  y[n][o] = Σ_k x[n][k] · w[o][k]   (a linear layer's [out, in] weight; attention scores q·k)
//   axpy: y[n][o] = Σ_j a[n][j] · w[j][o]   (a weight used transposed; attention's probabilities · values)
// Rows are given by pointer so that any layout (heads inside a token's row, cache rows) needs no copy.
// One body (linear_kernels_body.h) is compiled per ISA: AVX-512F, AVX2 + FMA + F16C, and plain C++.

#include <cstdint>

#include "moe/core/dtype.h"
#include "cpu/linear.h"

namespace moe::cpu {

struct DotTask {
  const float* const* x = nullptr;  // n rows of k floats
  int64_t n = 0, k = 0;
  const void* w = nullptr;  // rows of k values of w_dtype, w_stride elements apart
  DType w_dtype = DType::F32;
  int64_t w_stride = 0;
  float* const* y = nullptr;  // n output rows; y[i][o] is written for the o asked for
};

struct AxpyTask {
  const float* const* a = nullptr;  // n rows of j floats
  int64_t n = 0, j = 0;
  const void* w = nullptr;  // j rows of w_dtype, w_stride elements apart
  DType w_dtype = DType::F32;
  int64_t w_stride = 0;
  float* const* y = nullptr;  // n output rows; y[i][o] is written for the o asked for
  // y[i][o] += the sum instead of =: the sum over j continues from y in the same order, so that a product
  // split over j (the blocks of a paged KV cache) gives the bits of one call over the whole range.
  bool accumulate = false;
};

// Output columns [o0, o1) of each task, on the calling thread (callers split o or n across the pool).
void dot_rows(LinearIsa isa, const DotTask& task, int64_t o0, int64_t o1);
void axpy_rows(LinearIsa isa, const AxpyTask& task, int64_t o0, int64_t o1);

// Per ISA (linear_kernels_<isa>.cpp).
void dot_rows_scalar(const DotTask& task, int64_t o0, int64_t o1);
void axpy_rows_scalar(const AxpyTask& task, int64_t o0, int64_t o1);
void dot_rows_avx2(const DotTask& task, int64_t o0, int64_t o1);
void axpy_rows_avx2(const AxpyTask& task, int64_t o0, int64_t o1);
void dot_rows_avx512(const DotTask& task, int64_t o0, int64_t o1);
void axpy_rows_avx512(const AxpyTask& task, int64_t o0, int64_t o1);

}  // namespace moe::cpu
