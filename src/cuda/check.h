#pragma once
// Error checks for CUDA code. Free of fmt on purpose: nvcc cannot compile fmt's constexpr machinery, so
// .cu files use these, and the messages are formatted in check.cpp (built by the host compiler).
//   MOE_CUDA_CHECK(call)           throws moe::Error naming the call and CUDA's message
//   MOE_CUBLAS_CHECK(call)         likewise for cuBLAS status codes
//   MOE_CUDA_CHECK_LAUNCH()        after a kernel launch: reports bad launch configurations at once
//   MOE_CUDA_REQUIRE(cond, text)   throws moe::Error with `text` (a std::string) when cond is false

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace moe::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_message(const std::string& message, const char* file, int line);
}  // namespace moe::cuda::detail

#define MOE_CUDA_CHECK(call)                                                                            \
  do {                                                                                                  \
    const cudaError_t moe_cuda_status = (call);                                                         \
    if (moe_cuda_status != cudaSuccess)                                                                 \
      ::moe::cuda::detail::throw_cuda_error(moe_cuda_status, #call, __FILE__, __LINE__);                \
  } while (0)

#define MOE_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                  \
    const cublasStatus_t moe_cublas_status = (call);                                                    \
    if (moe_cublas_status != CUBLAS_STATUS_SUCCESS)                                                     \
      ::moe::cuda::detail::throw_cublas_error(moe_cublas_status, #call, __FILE__, __LINE__);            \
  } while (0)

#define MOE_CUDA_CHECK_LAUNCH() MOE_CUDA_CHECK(cudaGetLastError())

#define MOE_CUDA_REQUIRE(cond, text)                                                                    \
  do {                                                                                                  \
    if (!(cond)) ::moe::cuda::detail::throw_message((text), __FILE__, __LINE__);                        \
  } while (0)
