#pragma once
// moe::Tensor on the device: new ones from the stream-ordered pool, and copies across PCIe. A device
// tensor's owner frees its memory on `stream` when the last view of it goes (cudaFreeAsync), so that work
// already enqueued on that stream still reads valid memory.

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "moe/core/tensor.h"

namespace moe::cuda {

// A new contiguous device tensor (uninitialised), allocated on `stream` (cudaMallocAsync).
Tensor device_empty(DType dtype, std::vector<int64_t> shape, cudaStream_t stream);
// A device copy of host tensor x in `dtype` (converted on the host first, round-to-nearest-even).
Tensor to_device(const Tensor& x, DType dtype, cudaStream_t stream);
// A host copy of contiguous device tensor x; synchronises the stream.
Tensor to_host(const Tensor& x, cudaStream_t stream);

}  // namespace moe::cuda
