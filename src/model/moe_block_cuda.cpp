// The MoE blocks of the model on the GPU (ModelBackend::cuda): the hidden states go up as bf16, the
// block's fp32 output and routing come back, per layer; everything else stays on the CPU.
#include <algorithm>

#include "moe/cuda/check.h"
#include "moe/cuda/device_buffer.h"
#include "moe/cuda/device_info.h"
#include "moe/cuda/moe_layer.h"
#include "moe_block.h"

namespace moe::model {

namespace {

class CudaMoeBlock final : public MoeBlock {
 public:
  CudaMoeBlock(const MoeConfig& config, const MoeWeights& weights, int64_t max_tokens)
      : layer_(config, weights, {.max_tokens = max_tokens}),
        max_tokens_(max_tokens),
        x_(max_tokens * config.hidden_size),
        out_(max_tokens * config.hidden_size),
        weights_(max_tokens * config.router.top_k),
        ids_(max_tokens * config.router.top_k) {}

  MoeBlockOutput forward(const Tensor& input) override {
    const int64_t H = layer_.config().hidden_size, k = layer_.config().router.top_k;
    const Tensor x = layer_input_f32(input, H).to(DType::BF16);  // [T, H]
    const int64_t T = x.size(0);
    MoeBlockOutput out{.hidden_states = Tensor::empty(DType::F32, {T, H}),
                       .topk = {.ids = Tensor::empty(DType::I32, {T, k}), .weights = Tensor::empty(DType::F32, {T, k})}};
    for (int64_t t0 = 0; t0 < T; t0 += max_tokens_) {
      const int64_t n = std::min(max_tokens_, T - t0);
      MOE_CUDA_CHECK(cudaMemcpy(x_.get(), static_cast<const uint16_t*>(x.data()) + t0 * H, n * H * sizeof(uint16_t),
                                cudaMemcpyHostToDevice));
      layer_.forward(reinterpret_cast<const cuda::bf16*>(x_.get()), n, out_.get(), ids_.get(), weights_.get(), nullptr);
      MOE_CUDA_CHECK(cudaMemcpy(out.hidden_states.data_as<float>() + t0 * H, out_.get(), n * H * sizeof(float),
                                cudaMemcpyDeviceToHost));
      MOE_CUDA_CHECK(cudaMemcpy(out.topk.ids.data_as<int32_t>() + t0 * k, ids_.get(), n * k * sizeof(int32_t),
                                cudaMemcpyDeviceToHost));
      MOE_CUDA_CHECK(cudaMemcpy(out.topk.weights.data_as<float>() + t0 * k, weights_.get(), n * k * sizeof(float),
                                cudaMemcpyDeviceToHost));
    }
    return out;
  }

 private:
  cuda::CudaMoeLayer layer_;
  int64_t max_tokens_;
  cuda::DeviceBuffer<uint16_t> x_;  // [max_tokens, H] bf16
  cuda::DeviceBuffer<float> out_;   // [max_tokens, H]
  cuda::DeviceBuffer<float> weights_;
  cuda::DeviceBuffer<int32_t> ids_;
};

}  // namespace

std::unique_ptr<MoeBlock> make_cuda_moe_block(const MoeConfig& config, const MoeWeights& weights,
                                              const ModelOptions& options) {
  MOE_CHECK(!cuda::visible_gpus().empty(), "backend cuda: no GPU is visible (use the cpu backend)");
  MOE_CHECK(options.max_batched_tokens >= 1, "max_batched_tokens must be at least 1, got {}",
            options.max_batched_tokens);
  return std::make_unique<CudaMoeBlock>(config, weights, options.max_batched_tokens);
}

}  // namespace moe::model
