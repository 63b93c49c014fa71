#include "cuda/device_tensor.h"

#include <algorithm>
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

Tensor to_device(const Tensor& x, DType dtype, cudaStream_t stream, PinnedUpload& upload) {
  MOE_CUDA_REQUIRE(x.device() == Device::cpu, "to_device: the tensor is already on the device");
  const Tensor host = x.dtype() == dtype && x.is_contiguous() ? x : x.to(dtype);
  Tensor out = device_empty(dtype, host.shape(), stream);
  // NOTE: the allocation is ordered on `stream`, the copy on the upload's own: the one waits for the other.
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  upload.copy(out.data(), host.data(), host.nbytes());
  upload.finish();
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

std::vector<Tensor> HostStaging::to_host_all(std::span<const Tensor> xs, cudaStream_t stream) {
  constexpr size_t kAlign = 64;  // each copy starts on its own cache line
  std::vector<size_t> offsets;
  size_t bytes = 0;
  bool on_device = false;
  for (const Tensor& x : xs) {
    offsets.push_back(bytes);
    if (x.device() != Device::cuda) continue;
    on_device = true;
    MOE_CUDA_REQUIRE(x.is_contiguous(), "to_host_all: needs contiguous device tensors");
    bytes += (x.nbytes() + kAlign - 1) / kAlign * kAlign;
  }
  // NOTE: nothing on the device (a forward without a routing observer): no buffer and no wait.
  if (!on_device) return {xs.begin(), xs.end()};
  if (together_.data.use_count() > 1 || together_.bytes < bytes) {
    void* p = nullptr;
    MOE_CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(bytes, 16)));
    together_ = {.data = std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); }), .bytes = bytes};
  }
  auto* base = static_cast<uint8_t*>(together_.data.get());
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i].device() == Device::cuda)
      MOE_CUDA_CHECK(cudaMemcpyAsync(base + offsets[i], xs[i].data(), xs[i].nbytes(), cudaMemcpyDeviceToHost,
                                     stream));
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<Tensor> host;
  for (size_t i = 0; i < xs.size(); ++i)
    host.push_back(xs[i].device() == Device::cuda
                       ? Tensor::view(base + offsets[i], xs[i].dtype(), xs[i].shape(), together_.data)
                       : xs[i]);
  return host;
}

Tensor HostStaging::copy_into(const std::shared_ptr<void>& data, const Tensor& x, cudaStream_t stream) {
  MOE_CUDA_CHECK(cudaMemcpyAsync(data.get(), x.data(), x.nbytes(), cudaMemcpyDeviceToHost, stream));
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Tensor::view(data.get(), x.dtype(), x.shape(), data);
}

}  // namespace moe::cuda
