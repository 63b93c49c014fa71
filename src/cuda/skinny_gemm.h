#pragma once
// The decoder's dense GEMMs at a few rows (decode at small batches): y [rows, out] = x [rows, in] · w [out,
// in]ᵀ as one pass over w that reads each weight once for every row, bf16 inputs, fp32 sums, bf16 or fp32
// output. At one row cuBLASLt's GEMM read Qwen3-30B-A3B's attention projections at a fraction of the copy
// bandwidth; these are bandwidth-bound GEMVs.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace moe::cuda {

// The most rows skinny_gemm takes.
constexpr int64_t kSkinnyGemmMaxRows = 8;

// Whether skinny_gemm takes the shape: 1..kSkinnyGemmMaxRows rows, `in` a multiple of 8 (16-byte loads; x and
// w 16-byte aligned, as device allocations are).
bool skinny_gemm_takes(int64_t rows, int64_t in);

// y is bf16 [rows, out], or fp32 with y_f32. Rows of x and w are contiguous (strides in).
void skinny_gemm(const __nv_bfloat16* x, int64_t rows, int64_t in, const __nv_bfloat16* w, int64_t out, void* y,
                 bool y_f32, cudaStream_t stream);

}  // namespace moe::cuda
