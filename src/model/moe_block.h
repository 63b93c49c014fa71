#pragma once
// One decoder layer's MoE block behind a backend-neutral interface: a moe::MoeLayer of the CPU stages or of
// the CUDA stages (run through the layer's host path), or a caller's function. model/ sees only layer/ and
// core/ headers; whatever CUDA needs lives behind layer/cuda_stages.h.

#include <memory>

#include "moe/layer/moe_layer.h"
#include "moe/model/causal_lm.h"

namespace moe::model {

struct MoeBlockOutput {
  Tensor hidden_states;  // [T, H] F32: routed experts + shared experts
  TopK topk;             // [T, k] the router's choices (best first) and weights
};

class MoeBlock {
 public:
  virtual ~MoeBlock() = default;
  // x [T, H] (after post_attention_layernorm): F32 on the host, or for the CUDA block BF16 on the device too
  // (the outputs then stay on the device). With `topk_into` (the CUDA block's, for device activations: [T, k]
  // I32 and F32 device tensors) the routing is written there.
  virtual MoeBlockOutput forward(const Tensor& x, const TopK* topk_into = nullptr) = 0;
};

// The weights are the checkpoint views of load_moe_weights.
std::unique_ptr<MoeBlock> make_cpu_moe_block(const MoeConfig& config, MoeWeights weights, const ModelOptions& options);
// A block that runs `fn` (ModelOptions::moe_block).
std::unique_ptr<MoeBlock> make_function_moe_block(ModelOptions::MoeBlockFn fn);
// Uploads the weights (experts bf16, router fp32); host activations go in as bf16 and come back fp32, in
// chunks of at most options.max_batched_tokens tokens; device activations stay on the device. Throws moe::Error in a build without CUDA or
// without a visible GPU.
// The block runs on `stream` (the decoder's ops', DecoderOps::stream()).
std::unique_ptr<MoeBlock> make_cuda_moe_block(const MoeConfig& config, const MoeWeights& weights,
                                              const ModelOptions& options, Stream stream);

}  // namespace moe::model
