#include "moe_block.h"

namespace moe::model {

namespace {

class CpuMoeBlock final : public MoeBlock {
 public:
  CpuMoeBlock(const MoeConfig& config, MoeWeights weights, const ModelOptions& options)
      : layer_(config, std::move(weights),
               LayerOptions{.cpu_experts = options.cpu_experts, .cpu_weights = options.cpu_weights}) {}

  MoeBlockOutput forward(const Tensor& x) override {
    LayerOutput out = layer_.forward(x);
    return {.hidden_states = std::move(out.hidden_states), .topk = std::move(out.topk)};
  }

 private:
  MoeLayer layer_;
};

class FunctionMoeBlock final : public MoeBlock {
 public:
  explicit FunctionMoeBlock(ModelOptions::MoeBlockFn fn) : fn_(std::move(fn)) {}
  MoeBlockOutput forward(const Tensor& x) override {
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
  return std::make_unique<CpuMoeBlock>(config, std::move(weights), options);
}

#if !MOE_WITH_CUDA
std::unique_ptr<MoeBlock> make_cuda_moe_block(const MoeConfig&, const MoeWeights&, const ModelOptions&) {
  MOE_FAIL("this build of moe has no CUDA backend (configure with -DMOE_CUDA=ON on a machine with nvcc), "
           "use the cpu backend");
}
#endif

}  // namespace moe::model
