#pragma once
// Eight bf16 values packed in 16 bytes (one vector load), as the GEMV-like kernels read weights and rows.

#include <cuda_bf16.h>

namespace moe::cuda {

// acc + sum_i w[i] * x[i] over the 8 values, in fp32, one fused multiply-add after another.
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc = 0.0f) {
  const auto* wv = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* xv = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wv[i]), b = __bfloat1622float2(xv[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

}  // namespace moe::cuda
