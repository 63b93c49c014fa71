#pragma once
// The CUDA-graph property of a CudaMoeLayer, shared by the layer and decode tests.

#include <cstdint>

#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "test_random.h"

namespace moe::test {

// Captures one forward of a CudaMoeLayer at T tokens (built for max_tokens = T) in a CUDA graph and replays
// it on fresh random inputs, each replay launched three times over (what a launch leaves behind, such as
// the decode kernel's barriers or the wgmma work-unit queue, must serve the next one): the output must
// equal an eager forward's bit for bit and the CPU layer's within 1e-2, and where check_ids is set the
// top-k ids must be the CPU layer's.
void expect_graph_replays_match(const MoeConfig& config, const MoeWeights& weights, int64_t T, TestRng& rng,
                                bool check_ids);

}  // namespace moe::test
