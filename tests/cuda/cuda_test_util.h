#pragma once
// Helpers for the GPU tests: skip without a GPU, device buffers filled from host vectors or with junk,
// MoE configs whose sizes the CUDA kernels take, random experts in the kernels' layout, and the error
// measure the GPU tests compare with.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_info.h"
#include "gpu_skip.h"
#include "moe/core/expert_batch.h"
#include "moe/core/tensor.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_layer.h"
#include "test_random.h"

namespace moe::test {

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

// t's values as bf16 bits (rounded if t is not BF16).
std::vector<uint16_t> bf16_bits(const Tensor& t);

// E random SwiGLU experts (bf16 values, scale 0.1) and the device layout of their weights as bf16 bits:
// w13 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I].
struct RandomExperts {
  std::vector<SwigluWeights> experts;
  std::vector<uint16_t> w13, w2;
};
RandomExperts random_experts(int E, int64_t H, int64_t I, TestRng& rng);

// max |got - want| / max |want| over all values (want F32, as many as got); infinite if any of got is not
// finite.
double max_relative_error(const std::vector<float>& got, const Tensor& want);

// A GPU layer's output against the CPU layer's, over the tokens whose expert choices agree (an fp32 router
// on two devices may split a near tie differently, and such a token's output then differs by a whole
// expert): rel_error = max |got - want| over those tokens / max |want| over all (infinite if any of got is
// not finite).
struct ChoiceAgreement {
  double rel_error = 0;
  int64_t same_choices = 0, tokens = 0;
};
ChoiceAgreement compare_agreeing_tokens(const std::vector<float>& got, const std::vector<int32_t>& got_ids,
                                        const LayerOutput& want);

// rel_error within 1e-2, and the choices of all tokens but one in 50 (at least one) agree.
void expect_agreement(const ChoiceAgreement& c, const std::string& what);

// A HF config.json of `model_type` with CUDA-friendly sizes.
nlohmann::json cuda_case_config(const std::string& model_type, int64_t hidden, int64_t intermediate, int n_experts,
                                int top_k);

}  // namespace moe::test
