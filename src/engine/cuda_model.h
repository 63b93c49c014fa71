#pragma once
// The whole decoder on the GPU: a CausalLM whose ops (engine/cuda_decoder_ops.cpp) keep the hidden states,
// the activations and the paged KV cache in device memory, with the checkpoint's weights copied to the
// device as bf16 (norm weights and biases fp32) the first time an op reads them, and the MoE blocks on the
// CUDA stages' device forward. forward returns host logits (the only copy back besides the routing the
// observer reads).

#include <filesystem>
#include <memory>

#include "moe/core/checkpoint.h"
#include "moe/model/causal_lm.h"
#include "moe/model/model_config.h"

namespace moe::engine {

// CausalLM::load of DIR with every op on the current GPU (options.backend is taken as cuda). Throws
// moe::Error as CausalLM::load does, and where there is no GPU, options.moe_block is set (expert
// parallelism runs its blocks on host activations) or the build has no CUDA.
std::unique_ptr<model::CausalLM> load_cuda_causal_lm(const std::filesystem::path& dir,
                                                     model::ModelOptions options);
// The same from a parsed config and its weights; tensors the checkpoint makes on the device (bf16; norm
// weights and biases F32; the routers on the host) are kept where they are (Checkpoint::generated).
std::unique_ptr<model::CausalLM> load_cuda_causal_lm(model::ModelConfig config, Checkpoint checkpoint,
                                                     model::ModelOptions options);

}  // namespace moe::engine
