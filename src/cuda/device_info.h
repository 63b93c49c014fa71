#pragma once
// The GPUs the CUDA runtime sees. Host API only: callers need no CUDA headers.

#include <string>
#include <vector>

namespace moe::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  double memory_gib = 0;
};

// Empty when there is no driver or no GPU (never throws for that).
std::vector<GpuInfo> visible_gpus();

}  // namespace moe::cuda
