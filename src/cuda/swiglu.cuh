// SwiGLU as the CUDA kernels compute it, in fp32: silu(gate) * up = gate / (1 + e^-gate) * up, with the fast
// exponential and division (ex2.approx, rcp.approx). Their error is a few fp32 ulp (tens for |gate| > 10),
// far below the bf16 rounding of the activation that follows; the CPU reference computes it in double.
// NOTE: with the IEEE division (div.rn.f32: FCHK and a slow-path branch per value) the wgmma SwiGLU GEMM ran
// 708 us at Qwen3 T=8192, 654 with this one (tensor pipe 68 -> 77% busy; H200, 2026-12-01).
#pragma once

namespace moe::cuda {

__device__ __forceinline__ float swiglu(float gate, float up) {
  // gate <= -88: e^-gate >= 2^126, where __fdividef gives 0 (the quotient is about 2^-120 or less anyway).
  return __fdividef(gate, 1.0f + __expf(-gate)) * up;
}

}  // namespace moe::cuda
