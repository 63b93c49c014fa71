#include "ep/nccl_check.h"

#include <cstring>

#include "moe/core/check.h"

namespace moe::ep::detail {

namespace {

const char* base_name(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

// What to try for the errors a user can act on.
const char* hint(ncclResult_t status) {
  switch (status) {
    case ncclSystemError:
    case ncclRemoteError:
      return " (a peer failed or the processes cannot reach each other: check that every rank runs, one per GPU, "
             "and NCCL_DEBUG=WARN for details)";
    case ncclUnhandledCudaError:
      return " (a CUDA call inside NCCL failed: check the GPU with nvidia-smi)";
    case ncclInvalidUsage:
    case ncclInvalidArgument:
      return " (ranks disagree on the sizes exchanged, or two ranks use one GPU)";
    default:
      return "";
  }
}

}  // namespace

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw Error(fmt::format("NCCL error in {}: {}{}{}{}", call, ncclGetErrorString(status),
                          last && *last ? ": " : "", last ? last : "", hint(status)),
              fmt::format("{}:{}", base_name(file), line));
}

}  // namespace moe::ep::detail
