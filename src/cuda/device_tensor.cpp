#include "cuda/device_tensor.h"

#include <memory>

#include "cuda/check.h"

namespace moe::cuda {

Tensor device_empty(DType dtype, std::vector<int64_t> shape, cudaStream_t stream) {
  int64_t numel = 1;
  for (const int64_t d : shape) numel = checked_mul(numel, d, "device tensor elements");
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  void* data = nullptr;
  // NOTE: a zero-byte tensor still gets a distinct pointer, so that Tensor::defined() holds for it.
  MOE_CUDA_CHECK(cudaMallocAsync(&data, bytes > 0 ? bytes : 16, stream));
  std::shared_ptr<const void> owner(data,
                                    [stream](const void* p) { cudaFreeAsync(const_cast<void*>(p), stream); });
  return Tensor::view(data, dtype, std::move(shape), std::move(owner), Device::cuda);
}

Tensor to_device(const Tensor& x, DType dtype, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(x.device() == Device::cpu, "to_device: the tensor is already on the device");
  const Tensor host = x.to(dtype);  // contiguous
  Tensor out = device_empty(dtype, host.shape(), stream);
  MOE_CUDA_CHECK(cudaMemcpyAsync(out.data(), host.data(), host.nbytes(), cudaMemcpyHostToDevice, stream));
  // NOTE: a copy from pageable memory may return before it has read all of `host`, which dies here.
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

Tensor HostStaging::to_host(const Tensor& x, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(x.device() == Device::cuda && x.is_contiguous(),
                   "to_host: needs a contiguous device tensor");
  // NOTE: a few buffers cover a caller that keeps the last step's logits while it asks for the next; a free
  // one too small is replaced, and past them a buffer is made for the one copy.
  constexpr size_t kMaxBuffers = 4;
  Buffer* slot = nullptr;
  for (Buffer& b : buffers_) {
    if (b.data.use_count() != 1) continue;
    if (b.bytes >= x.nbytes()) return copy_into(b.data, x, stream);
    slot = &b;
  }
  if (slot == nullptr && buffers_.size() < kMaxBuffers) slot = &buffers_.emplace_back();
  void* p = nullptr;
  MOE_CUDA_CHECK(cudaMallocHost(&p, x.nbytes() > 0 ? x.nbytes() : 16));
  const std::shared_ptr<void> data(p, [](void* q) { cudaFreeHost(q); });
  if (slot != nullptr) *slot = {.data = data, .bytes = x.nbytes()};
  return copy_into(data, x, stream);
}

Tensor HostStaging::copy_into(const std::shared_ptr<void>& data, const Tensor& x, cudaStream_t stream) {
  MOE_CUDA_CHECK(cudaMemcpyAsync(data.get(), x.data(), x.nbytes(), cudaMemcpyDeviceToHost, stream));
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Tensor::view(data.get(), x.dtype(), x.shape(), data);
}

}  // namespace moe::cuda
