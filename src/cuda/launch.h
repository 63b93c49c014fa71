#pragma once
// Programmatic dependent launch (Hopper): a kernel launched with launch_dependent() may be scheduled while
// the kernel before it in the stream is still finishing; it must call wait_for_prior_grids() before it
// touches memory that kernel writes. The kernels of one forward form such a chain, which hides most of
// the launch gap between them (it matters in decode, where each kernel runs for a few microseconds).

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "cuda/check.h"

namespace moe::cuda {

// Blocks until every grid this one depends on has completed and its writes are visible.
__device__ __forceinline__ void wait_for_prior_grids() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next grid in the stream be scheduled once every block of this one has called this (or exited).
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// The launch attribute of clusters of cluster_x blocks along x.
inline cudaLaunchAttribute cluster_dimension(unsigned cluster_x) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster_x;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  return attribute;
}

// launch_dependent in clusters of cluster_x blocks (grid.x a multiple of it; 1: no clusters).
template <class... Params, class... Args>
void launch_dependent_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                               cudaStream_t stream, unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  unsigned n_attributes = 1;
  if (cluster_x > 1) attributes[n_attributes++] = cluster_dimension(cluster_x);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = n_attributes;
  MOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      Args&&... args) {
  launch_dependent_clusters(kernel, grid, block, shared_bytes, stream, 1u, std::forward<Args>(args)...);
}

// The current device's multiprocessors.
inline int sm_count() {
  int device = 0, sms = 0;
  MOE_CUDA_CHECK(cudaGetDevice(&device));
  MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Raises Kernel's dynamic shared-memory limit to `bytes` on the current device, the first time only: the
// attribute belongs to the kernel on one device, and it is set once, not per launch, so that a launch inside
// a graph capture does not depend on host-side state changing later. True on that first call (for other
// once-per-device set-up of the same kernel). Kernel is a template argument so that each kernel has its own
// record (kernels of one signature would share a record keyed by type).
template <auto Kernel>
bool raise_shared_memory_once(size_t bytes) {
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  MOE_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device % 64);
  if (configured_devices.load() & bit) return false;
  MOE_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  configured_devices.fetch_or(bit);
  return true;
}

// How many clusters of cluster_x blocks of this kernel fit on the GPU at once.
template <class... Params>
int max_active_clusters(void (*kernel)(Params...), unsigned max_blocks, dim3 block, size_t shared_bytes,
                        unsigned cluster_x) {
  cudaLaunchAttribute attribute = cluster_dimension(cluster_x);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(max_blocks);
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  MOE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kernel), &config));
  return clusters;
}

}  // namespace moe::cuda
