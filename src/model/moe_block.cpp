#include "moe_block.h"

#if MOE_WITH_CUDA
#include "moe/layer/cuda_stages.h"
#endif

namespace moe::model {

namespace {

// The CPU stages, in place.
class LayerMoeBlock final : public MoeBlock {
 public:
  explicit LayerMoeBlock(MoeLayer layer) : layer_(std::move(layer)) {}

  MoeBlockOutput forward(const Tensor& x, const TopK* topk_into) override {
    MOE_CHECK(!topk_into, "the CPU MoE block returns its routing; it writes into no given tensors");
    LayerOutput out = layer_.forward(x);
    return {.hidden_states = std::move(out.hidden_states), .topk = std::move(out.topk)};
  }

 private:
  MoeLayer layer_;
};

#if MOE_WITH_CUDA
// The CUDA stages: host activations through the layer's host path (pinned staging), device activations
// (the decoder on the GPU) through its device forward, on the stream of the GPU decoder's ops, with nothing
// copied to the host.
class CudaMoeBlock final : public MoeBlock {
 public:
  CudaMoeBlock(MoeLayer layer, Stream stream) : layer_(std::move(layer)), stream_(stream) {}

  MoeBlockOutput forward(const Tensor& x, const TopK* topk_into) override {
    MOE_CHECK(!topk_into || x.device() == Device::cuda,
              "the CUDA MoE block writes its routing into given tensors only for device activations");
    LayerOutput out =
        x.device() == Device::cuda ? forward_device_tensors(layer_, x, stream_, topk_into) : layer_.forward(x);
    return {.hidden_states = std::move(out.hidden_states), .topk = std::move(out.topk)};
  }

 private:
  MoeLayer layer_;
  Stream stream_;
};
#endif

class FunctionMoeBlock final : public MoeBlock {
 public:
  explicit FunctionMoeBlock(ModelOptions::MoeBlockFn fn) : fn_(std::move(fn)) {}
  MoeBlockOutput forward(const Tensor& x, const TopK* topk_into) override {
    MOE_CHECK(!topk_into, "a MoE block function returns its routing; it writes into no given tensors");
    LayerOutput out = fn_(x);
    return {.hidden_states = std::move(out.hidden_states), .topk = std::move(out.topk)};
  }

 private:
  ModelOptions::MoeBlockFn fn_;
};

}  // namespace

std::unique_ptr<MoeBlock> make_function_moe_block(ModelOptions::MoeBlockFn fn) {
  return std::make_unique<FunctionMoeBlock>(std::move(fn));
}

std::unique_ptr<MoeBlock> make_cpu_moe_block(const MoeConfig& config, MoeWeights weights, const ModelOptions& options) {
  return std::make_unique<LayerMoeBlock>(
      MoeLayer(config, std::move(weights),
               LayerOptions{.cpu_experts = options.cpu_experts, .cpu_weights = options.cpu_weights}));
}

std::unique_ptr<MoeBlock> make_cuda_moe_block(const MoeConfig& config, const MoeWeights& weights,
                                              const ModelOptions& options, Stream stream) {
#if MOE_WITH_CUDA
  MOE_CHECK(cuda_device_available(), "backend cuda: no GPU is visible (use the cpu backend)");
  MOE_CHECK(options.max_batched_tokens >= 1, "max_batched_tokens must be at least 1, got {}",
            options.max_batched_tokens);
  return std::make_unique<CudaMoeBlock>(
      MoeLayer(config, make_cuda_stages(config, weights, {.max_tokens = options.max_batched_tokens})), stream);
#else
  (void)config, (void)weights, (void)options, (void)stream;
  MOE_FAIL("this build of moe has no CUDA backend (configure with -DMOE_CUDA=ON on a machine with nvcc), "
           "use the cpu backend");
#endif
}

}  // namespace moe::model
