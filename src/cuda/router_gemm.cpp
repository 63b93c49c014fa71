#include "moe/cuda/router_gemm.h"

#include <vector>

#include "moe/core/check.h"
#include "moe/core/float_convert.h"
#include "moe/cuda/check.h"

namespace moe::cuda {

RouterGemm::RouterGemm(const float* w, int64_t rows, int64_t h) : rows_(rows), h_(h) {
  MOE_CHECK(rows >= 1 && h >= 1, "router GEMM: {} x {} weights", rows, h);
  std::vector<uint16_t> terms;
  n_terms_ = split_bf16_terms(w, static_cast<size_t>(rows * h), terms);
  terms_ = DeviceBuffer<__nv_bfloat16>(terms.size());
  MOE_CUDA_CHECK(cudaMemcpy(terms_.get(), terms.data(), terms.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
}

void RouterGemm::run(cublasHandle_t cublas, const __nv_bfloat16* x, int64_t T, float* logits,
                     cudaStream_t stream) const {
  MOE_CHECK(n_terms_ > 0, "router GEMM: no weights");
  if (T == 0) return;
  MOE_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  // Column-major view: logitsᵀ [rows, T] = term [h, rows]ᵀ · xᵀ [h, T], the terms accumulated into it.
  const float one = 1.0f, zero = 0.0f;
  for (int j = 0; j < n_terms_; ++j) {
    MOE_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows_), static_cast<int>(T),
                                  static_cast<int>(h_), &one, terms_.get() + j * rows_ * h_, CUDA_R_16BF,
                                  static_cast<int>(h_), x, CUDA_R_16BF, static_cast<int>(h_), j == 0 ? &zero : &one,
                                  logits, CUDA_R_32F, static_cast<int>(rows_), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace moe::cuda
