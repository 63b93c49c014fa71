#pragma once
// What the MPI tests of the EP layer share: a seed every rank agrees on and a random MoE block loaded through
// the checkpoint path, as a real model's is.

#include <cstdint>
#include <string>

#include "ep/communicator.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "random_moe_case.h"
#include "test_random.h"

namespace moe::ep {

// Rank 0's fresh seed (or MOE_TEST_SEED), the same on every rank (collective).
uint64_t shared_seed(Communicator& comm);

// A random block of `model_type`: the case, its config and its weights read back from a safetensors file.
struct Block {
  moe::test::MoeCase c;
  MoeConfig config;
  MoeWeights weights;
};
Block make_block(const std::string& model_type, moe::test::TestRng& rng, moe::test::CaseOptions opt = {});

}  // namespace moe::ep
