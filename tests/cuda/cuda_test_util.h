#pragma once
// Helpers for the GPU tests: skip without a GPU, device buffers filled from host vectors or with junk,
// and MoE configs whose sizes the CUDA kernels take.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "moe/cuda/check.h"
#include "moe/cuda/device_info.h"
#include "moe/layer/moe_config.h"

namespace moe::test {

#define MOE_SKIP_WITHOUT_GPU()                                       \
  do {                                                               \
    if (::moe::cuda::visible_gpus().empty()) GTEST_SKIP() << "no GPU"; \
  } while (0)

// A device copy of `host`, or `count` elements of junk (0xA5 bytes) when host is empty.
template <class T>
class Device {
 public:
  explicit Device(const std::vector<T>& host) : count_(host.size()) {
    MOE_CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(1, count_) * sizeof(T)));
    MOE_CUDA_CHECK(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit Device(size_t count) : count_(count) {
    MOE_CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(1, count_) * sizeof(T)));
    MOE_CUDA_CHECK(cudaMemset(data_, 0xA5, std::max<size_t>(1, count_) * sizeof(T)));
  }
  ~Device() { cudaFree(data_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  T* get() const { return data_; }
  std::vector<T> host() const {
    MOE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> out(count_);
    MOE_CUDA_CHECK(cudaMemcpy(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* data_ = nullptr;
  size_t count_;
};

// A HF config.json of `model_type` with CUDA-friendly sizes.
nlohmann::json cuda_case_config(const std::string& model_type, int64_t hidden, int64_t intermediate, int n_experts,
                                int top_k);

}  // namespace moe::test
