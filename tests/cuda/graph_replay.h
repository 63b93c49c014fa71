#pragma once
// The CUDA-graph property of the CUDA layer (a MoeLayer of the CUDA stages), shared by the layer and decode
// tests.

#include <cstdint>

#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "test_random.h"

namespace moe::test {

// Captures one device forward of the CUDA layer at T tokens (built for max_tokens = T) in a CUDA graph and
// replays it on fresh random inputs, each replay launched three times over (what a launch leaves behind, such as
// the decode kernel's barriers or the wgmma work-unit queue, must serve the next one): the output must
// equal an eager forward's bit for bit and agree with the CPU layer's (expect_agreement: the tokens whose
// top-k ids are the CPU layer's within 1e-2, and all but one in 50 of them such).
void expect_graph_replays_match(const MoeConfig& config, const MoeWeights& weights, int64_t T, TestRng& rng);

}  // namespace moe::test
