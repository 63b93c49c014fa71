#include "cuda/linear.h"

#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

#include "cuda/check.h"
#include "cuda/device_buffer.h"
#include "cuda/skinny_gemm.h"
#include "core/knobs.h"

namespace moe::cuda {

namespace {

// The most rows that take skinny_gemm by default: on the 48-layer Qwen3-30B-A3B shape (H200, 2026-12-02)
// decode at batch 1 / 2 ran 164.3 -> 191.0 / 288.0 -> 322.0 tok/s with it, batch 4 even (483.0 / 479.7) and
// batch 8 slower (747.7 -> 719.5: lm_head's 151,936 columns re-read x from L1 for every row).
constexpr int64_t kSkinnyGemmDefaultRows = 3;

// cuBLASLt's heuristic may pick algorithms that use up to this much scratch; 32 MiB covers Hopper's.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_lt(cublasStatus_t status, const char* what) {
  MOE_CUDA_REQUIRE(status == CUBLAS_STATUS_SUCCESS,
                   std::string("cuBLASLt ") + what + " failed: " + cublasGetStatusString(status));
}

}  // namespace

struct DenseGemm::Impl {
  using Key = std::tuple<int64_t, int64_t, int64_t, bool>;  // rows, in, out, fp32 output
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer<uint8_t> workspace{kWorkspaceBytes};
  std::map<Key, Plan> plans;

  // Column-major, y becomes yᵀ [out, rows] = wᵀᵀ · xᵀ: w (row-major [out, in] = column-major [in, out])
  // transposed, times x (row-major [rows, in] = column-major [in, rows]).
  const Plan& plan(int64_t rows, int64_t in, int64_t out, bool y_f32) {
    const Key key{rows, in, out, y_f32};
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan p;
    check_lt(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
             "transa");
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)),
             "transb");
    check_lt(cublasLtMatrixLayoutCreate(&p.w, CUDA_R_16BF, in, out, in), "weight layout");
    check_lt(cublasLtMatrixLayoutCreate(&p.x, CUDA_R_16BF, in, rows, in), "input layout");
    check_lt(cublasLtMatrixLayoutCreate(&p.y, y_f32 ? CUDA_R_32F : CUDA_R_16BF, out, rows, out),
             "output layout");
    cublasLtMatmulPreference_t preference = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&preference), "preference");
    size_t bytes = kWorkspaceBytes;
    check_lt(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &bytes, sizeof(bytes)),
             "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.w, p.x, p.y, p.y, preference, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    check_lt(status, "heuristic");
    MOE_CUDA_REQUIRE(found > 0, "cuBLASLt has no algorithm for a [" + std::to_string(rows) + ", " +
                                    std::to_string(in) + "] x [" + std::to_string(out) + ", " +
                                    std::to_string(in) + "]^T bf16 GEMM");
    p.algo = result.algo;
    return plans.emplace(key, p).first->second;
  }

  ~Impl() {
    for (auto& [key, p] : plans) {
      cublasLtMatrixLayoutDestroy(p.w);
      cublasLtMatrixLayoutDestroy(p.x);
      cublasLtMatrixLayoutDestroy(p.y);
      cublasLtMatmulDescDestroy(p.op);
    }
    if (handle) cublasLtDestroy(handle);
  }
};

DenseGemm::DenseGemm() : impl_(std::make_unique<Impl>()) {
  check_lt(cublasLtCreate(&impl_->handle), "handle");
}

DenseGemm::~DenseGemm() = default;

void DenseGemm::linear(const __nv_bfloat16* x, int64_t rows, int64_t in, const __nv_bfloat16* w, int64_t out,
                       void* y, bool y_f32, cudaStream_t stream) {
  if (rows == 0 || out == 0) return;
  if (rows <= knobs().skinny_gemm_max_rows.value_or(kSkinnyGemmDefaultRows) && skinny_gemm_takes(rows, in)) {
    skinny_gemm(x, rows, in, w, out, y, y_f32, stream);
    return;
  }
  const Impl::Plan& p = impl_->plan(rows, in, out, y_f32);
  const float one = 1.0f, zero = 0.0f;
  check_lt(cublasLtMatmul(impl_->handle, p.op, &one, w, p.w, x, p.x, &zero, y, p.y, y, p.y, &p.algo,
                          impl_->workspace.get(), kWorkspaceBytes, stream),
           "matmul");
}

}  // namespace moe::cuda
