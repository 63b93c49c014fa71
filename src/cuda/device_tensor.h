#pragma once
// moe::Tensor on the device: new ones from the stream-ordered pool, and copies across PCIe. A device
// tensor's owner frees its memory on `stream` when the last view of it goes (cudaFreeAsync), so that work
// already enqueued on that stream still reads valid memory.

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/pinned_upload.h"
#include "moe/core/tensor.h"

namespace moe::cuda {

// A new contiguous device tensor (uninitialised), allocated on `stream` (cudaMallocAsync).
Tensor device_empty(DType dtype, std::vector<int64_t> shape, cudaStream_t stream);
// A device copy of host tensor x in `dtype` (converted on the host first, round-to-nearest-even).
Tensor to_device(const Tensor& x, DType dtype, cudaStream_t stream);
// The same through `upload`'s page-locked chunks (a checkpoint's weights at load: the next chunk is read
// from the memory map while the last one crosses PCIe); the tensor is ready to use on `stream` when it returns.
Tensor to_device(const Tensor& x, DType dtype, cudaStream_t stream, PinnedUpload& upload);

// Host copies into page-locked buffers, each reused once no tensor views it any more: a decode step's
// logits come back at the link's rate into pages already mapped (the 4-layer Qwen3-30B-A3B shape on the
// H200 decoded at batch 16 at 2,957 tokens/s this way, 1,958 into a fresh pageable tensor each step).
class HostStaging {
 public:
  // A host copy of contiguous device tensor x, in a page-locked buffer; synchronises the stream.
  Tensor to_host(const Tensor& x, cudaStream_t stream);
  // Host copies of xs (host tensors as they are, device ones contiguous), the device ones together in one
  // page-locked buffer, reused while no tensor of the last call is alive; one synchronisation for all.
  std::vector<Tensor> to_host_all(std::span<const Tensor> xs, cudaStream_t stream);

 private:
  struct Buffer {
    std::shared_ptr<void> data;  // cudaFreeHost when the last tensor viewing it goes
    size_t bytes = 0;
  };
  static Tensor copy_into(const std::shared_ptr<void>& data, const Tensor& x, cudaStream_t stream);

  std::vector<Buffer> buffers_;
  Buffer together_;  // to_host_all's
};

}  // namespace moe::cuda
