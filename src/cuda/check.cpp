#include "cuda/check.h"

#include <cstring>

#include "moe/core/check.h"

namespace moe::cuda::detail {

namespace {
const char* base_name(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}
}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so that the caller may go on
  throw Error(fmt::format("CUDA error in {}: {} ({})", call, cudaGetErrorString(status), cudaGetErrorName(status)),
              fmt::format("{}:{}", base_name(file), line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("cuBLAS error in {}: {}", call, cublasGetStatusString(status)),
              fmt::format("{}:{}", base_name(file), line));
}

void throw_message(const std::string& message, const char* file, int line) {
  throw Error(message, fmt::format("{}:{}", base_name(file), line));
}

}  // namespace moe::cuda::detail
