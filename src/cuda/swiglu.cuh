// SwiGLU as the CUDA kernels compute it, in fp32: silu(gate) * up = gate / (1 + e^-gate) * up, with the fast
// exponential and division (ex2.approx, rcp.approx). Their error is a few fp32 ulp, far below the bf16
// rounding of the activation that follows; the CPU reference computes it in double.
// NOTE: the IEEE division (div.rn.f32) was about ten instructions and a slow-path branch per value, in the
// wgmma epilogue that idles the tensor cores (bench/RESULTS.md, 21st session).
#pragma once

namespace moe::cuda {

__device__ __forceinline__ float swiglu(float gate, float up) {
  // gate <= -88: e^-gate >= 2^126, where __fdividef gives 0 (the quotient is below 2^-120 anyway).
  return __fdividef(gate, 1.0f + __expf(-gate)) * up;
}

}  // namespace moe::cuda
