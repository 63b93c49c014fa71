#pragma once
// Programmatic dependent launch (Hopper): a kernel launched with launch_dependent() may be scheduled while
// the kernel before it in the stream is still finishing; it must call wait_for_prior_grids() before it
// touches memory that kernel writes. The kernels of one forward form such a chain, which hides most of
// the launch gap between them (it matters in decode, where each kernel runs for a few microseconds).

#include <cuda_runtime.h>

#include <utility>

#include "moe/cuda/check.h"

namespace moe::cuda {

// Blocks until every grid this one depends on has completed and its writes are visible.
__device__ __forceinline__ void wait_for_prior_grids() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next grid in the stream be scheduled once every block of this one has called this (or exited).
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }

template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  MOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace moe::cuda
