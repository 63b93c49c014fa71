#pragma once
// Error checks for NCCL calls, in the style of cuda/check.h: free of fmt (so that .cu files may use
// it); the message is formatted in nccl_check.cpp. Only where the build has NCCL (MOE_WITH_NCCL).
//   MOE_NCCL_CHECK(call)   throws moe::Error naming the call, NCCL's message and its last error text

#include <nccl.h>

namespace moe::ep::detail {
[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line);
}  // namespace moe::ep::detail

#define MOE_NCCL_CHECK(call)                                                                            \
  do {                                                                                                  \
    const ncclResult_t moe_nccl_status = (call);                                                        \
    if (moe_nccl_status != ncclSuccess)                                                                 \
      ::moe::ep::detail::throw_nccl_error(moe_nccl_status, #call, __FILE__, __LINE__);                \
  } while (0)
