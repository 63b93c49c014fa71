#include <cuda_runtime.h>

#include "cuda/device_info.h"

namespace moe::cuda {

std::vector<GpuInfo> visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return {};
  }
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    gpus.push_back({.index = i,
                    .name = prop.name,
                    .compute_major = prop.major,
                    .compute_minor = prop.minor,
                    .sm_count = prop.multiProcessorCount,
                    .memory_gib = static_cast<double>(prop.totalGlobalMem) / (1ull << 30)});
  }
  return gpus;
}

}  // namespace moe::cuda
