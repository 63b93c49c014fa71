#pragma once
// The CUDA layer in tests: a MoeLayer of the CUDA stages, and its device forward on raw device buffers
// (what an embedding caller holds).

#include <cuda_runtime.h>

#include <cstdint>

#include "moe/layer/cuda_stages.h"
#include "moe/layer/moe_layer.h"

namespace moe::test {

inline MoeLayer cuda_layer(const MoeConfig& config, const MoeWeights& weights, CudaLayerOptions options = {}) {
  return MoeLayer(config, make_cuda_stages(config, weights, options));
}

// x [T, H] bf16 -> out [T, H] fp32, topk_ids [T, k] int32, topk_weights [T, k] fp32, all on the device.
inline void forward_on_device(MoeLayer& layer, const void* x, int64_t T, float* out, int32_t* topk_ids,
                              float* topk_weights, cudaStream_t stream) {
  const int64_t H = layer.config().hidden_size, k = layer.config().router.top_k;
  const Tensor x_view = Tensor::view(const_cast<void*>(x), DType::BF16, {T, H}, nullptr, moe::Device::cuda);
  const TopK topk{.ids = Tensor::view(topk_ids, DType::I32, {T, k}, nullptr, moe::Device::cuda),
                  .weights = Tensor::view(topk_weights, DType::F32, {T, k}, nullptr, moe::Device::cuda)};
  Tensor out_view = Tensor::view(out, DType::F32, {T, H}, nullptr, moe::Device::cuda);
  layer.forward(x_view, topk, out_view, Stream::cuda(stream));
}

}  // namespace moe::test
