#pragma once
// What the GPU tests of expert parallelism share, under `mpirun -np R` with one process per GPU: the ranks
// (MPI, and NCCL when every rank has a GPU: set up by cuda_ep_main.cpp, which runs the tests), a seed every
// rank agrees on, a random block, and the single-GPU layer that is their oracle with its comparison.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "ep/communicator.h"
#include "ep/device_communicator.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/moe_weights.h"
#include "test_random.h"

namespace moe::ep {

extern Communicator* g_host;
extern DeviceCommunicator* g_comm;  // null when the tests skip
extern std::string g_skip;          // why every rank skips (no NCCL, fewer GPUs than ranks); empty: they run

#define MOE_SKIP_WITHOUT_GPU_RANKS()                          \
  do {                                                        \
    if (!::moe::ep::g_skip.empty()) GTEST_SKIP() << ::moe::ep::g_skip; \
  } while (0)

// Rank 0's fresh seed (or MOE_TEST_SEED), the same on every rank. Collective.
uint64_t shared_seed();

struct GpuBlock {
  MoeConfig config;
  MoeWeights weights;  // bf16 experts on the host
  Tensor x;            // [T, H] F32, values exactly bf16
};
// A random block of `type` (cuda_case_config: H 256, intermediate I, E experts, top-k k).
GpuBlock make_gpu_block(const std::string& type, int64_t T, test::TestRng& rng, int E = 64, int k = 6,
                        int64_t I = 128);

// The single-GPU layer on all T tokens (this rank's GPU): hidden states [T, H] and top-k ids [T, k] on the host.
LayerOutput single_gpu(const GpuBlock& b);

struct Compared {
  double max_rel = 0, normwise = 0;
  int64_t same_choices = 0;
};
// Over the tokens whose expert choices agree (an fp32 router over a different batch may split a near tie
// differently): max |a - b| / max |b|, and ||a - b|| / ||b||; no output may be NaN.
Compared compare(const LayerOutput& ep, const LayerOutput& ref);

}  // namespace moe::ep
