#pragma once
// The router's logits for batches past the fused router kernel: x · Wᵀ with W the fp32 router weights
// [rows, H], stored as a sum of bf16 terms (split_bf16_terms: one term where W is bf16 already, as in most
// checkpoints, at most three), all of them in one cuBLAS bf16 GEMM with fp32 accumulation (the terms
// stacked as [terms x rows, H]), which writes a part of the logits per term; router_topk sums the parts.
// x is bf16, so every product of x and a term is exact in fp32 and the terms sum to W: the logits keep the
// fp32 SGEMM's accuracy (a different summation order) at the tensor-core rate, x needs no fp32 copy first,
// and x is read once, not once per term.

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/device_buffer.h"

namespace moe::cuda {

// Up to this many tokens a layer routes in one fused launch (router_fused); past it, RouterGemm then
// router_topk, unless the gate is small enough for fused_router_takes.
inline constexpr int64_t kFusedRouterMaxTokens = 64;

// Whether a layer routes T tokens through router_fused: up to kFusedRouterMaxTokens always, and up to 128
// while T * gate_rows * hidden stays within 2^22 multiply-adds (Mixtral; not Qwen3-30B-A3B or DeepSeek-V3).
// NOTE: the fused kernel's CUDA-core dot products and its L2 reads of x and the gate grow with
// T * gate_rows * hidden. With RouterGemm as one cuBLAS GEMM, the layer measured (H200, 2026-11-30): Qwen3 T=128 315.4 us fused against 310.8 through RouterGemm, T=64 even;
// Mixtral T=128 749.6 fused against 752.0, T=16 and 32 5 us faster fused. Monotone in T: a layer whose
// largest batch is fused needs no RouterGemm.
inline bool fused_router_takes(int64_t n_tokens, int64_t gate_rows, int64_t hidden) {
  return n_tokens <= kFusedRouterMaxTokens || (n_tokens <= 128 && n_tokens * gate_rows * hidden <= (int64_t{1} << 22));
}

class RouterGemm {
 public:
  RouterGemm() = default;
  // w: [rows, h] fp32 on the host.
  RouterGemm(const float* w, int64_t rows, int64_t h);
  ~RouterGemm();
  RouterGemm(RouterGemm&& other) noexcept;
  RouterGemm& operator=(RouterGemm&& other) noexcept;
  RouterGemm(const RouterGemm&) = delete;
  RouterGemm& operator=(const RouterGemm&) = delete;

  int terms() const { return n_terms_; }
  // logit_parts [T, terms() x rows] (row-major, fp32): columns [j rows, (j + 1) rows) hold x[T, h] · term_jᵀ,
  // and a token's logits are its parts summed in order (router_topk does); on `stream` (capturable into a
  // CUDA graph).
  void run(const __nv_bfloat16* x, int64_t T, float* logit_parts, cudaStream_t stream) const;

 private:
  DeviceBuffer<__nv_bfloat16> terms_;  // [n_terms, rows, h]
  int n_terms_ = 0;
  int64_t rows_ = 0, h_ = 0;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;  // cuBLAS's, so that a captured graph allocates nothing
};

// The logits buffer of a layer routing up to max_tokens with `rows` gate rows: room for RouterGemm's parts
// (or the fused router's logits), zeroed once.
// NOTE: the zeroing is for compute-sanitizer's initcheck, which does not see the writes of cuBLAS's GEMM
// kernel: without it, router_topk's every read of the parts is reported as uninitialized (RouterGemm then
// router_topk, each result right; CudaRouter.RouterGemmThenTopKMatchesTheCpuRouter, 2026-12-01). Zeroed, initcheck can find real uninitialized reads in the layer's own kernels.
DeviceBuffer<float> router_logits_buffer(int64_t max_tokens, int64_t rows, const RouterGemm& gemm);

}  // namespace moe::cuda
