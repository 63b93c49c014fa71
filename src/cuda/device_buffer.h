#pragma once
// An owning device allocation (cudaMalloc), typed, movable, freed on destruction.

#include <cstddef>
#include <utility>

#include "cuda/check.h"

namespace moe::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0) MOE_CUDA_CHECK(cudaMalloc(&data_, count * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  size_t size() const { return count_; }
  void upload(const T* host, size_t count, size_t offset = 0) {
    MOE_CUDA_REQUIRE(offset + count <= count_, "upload past the end of a device buffer");
    MOE_CUDA_CHECK(cudaMemcpy(data_ + offset, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace moe::cuda
