#pragma once
// The decoder's dense GEMMs through cuBLASLt: y [rows, out] = x [rows, in] · w [out, in]ᵀ, bf16 inputs
// (row-major, as the checkpoint stores w), fp32 accumulation, bf16 or fp32 (lm_head's logits) output.
// One object per stream user: it owns the cuBLASLt handle, its workspace and the algorithm chosen for each
// shape (the heuristic's first pick, asked once per shape). Up to MOE_SKINNY_GEMM_MAX_ROWS rows (default 3)
// the product is skinny_gemm's GEMV instead (skinny_gemm.h).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace moe::cuda {

class DenseGemm {
 public:
  DenseGemm();
  ~DenseGemm();
  DenseGemm(const DenseGemm&) = delete;
  DenseGemm& operator=(const DenseGemm&) = delete;

  // y is bf16 [rows, out], or fp32 with y_f32.
  void linear(const __nv_bfloat16* x, int64_t rows, int64_t in, const __nv_bfloat16* w, int64_t out, void* y,
              bool y_f32, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::cuda
