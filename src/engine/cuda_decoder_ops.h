#pragma once
// The GPU's DecoderOps (cuda_decoder_ops.cpp), for load_cuda_causal_lm and for the tests that hold each op
// against the CPU's. Its ops take and return device tensors, and weights made by its load_weight.

#include <memory>

#include "../model/decoder_ops.h"

namespace moe::engine {

std::unique_ptr<model::DecoderOps> make_cuda_decoder_ops();

}  // namespace moe::engine
