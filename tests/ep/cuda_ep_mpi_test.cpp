// Expert parallelism on GPUs (NCCL data path, MPI bootstrap) against the single-GPU layer, run under
// `mpirun -np R` with one process per GPU: every rank runs every test; rank 0 computes the single-GPU
// layer on its GPU and compares it with the gathered output. Skips (every rank alike) without NCCL in the
// build or without a GPU per rank (cuda_ep_main.cpp).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <numeric>

#include "cuda_ep_case.h"
#include "ep/data_parallel.h"
#include "ep/ep_layer.h"
#include "test_random.h"

namespace moe::ep {
namespace {

// Runs the EP layer (collective) and, on rank 0, compares with the single-GPU layer (the comparison; zero
// on the other ranks).
Compared expect_matches_single_gpu(const GpuBlock& b, const Placement& placement, Transfer transfer,
                                   const std::string& what, Transfer combine = Transfer::bf16) {
  const int64_t T = b.x.size(0), k = b.config.router.top_k;
  EpLayer layer = make_cuda_ep_layer(*g_comm, b.config, b.weights, placement,
                                     {.dispatch = transfer, .combine = combine}, T);
  const EpOutput ep = forward_data_parallel(layer, b.x);
  EXPECT_EQ(static_cast<int>(ep.ranks.size()), g_comm->size());
  int64_t tokens = 0, pairs = 0;
  for (const ExchangeStats& s : ep.ranks) tokens += s.tokens, pairs += s.pairs_served;
  EXPECT_EQ(tokens, T) << what;
  EXPECT_EQ(pairs, T * k) << what;  // every pair served exactly once
  if (g_host->rank() != 0) return {};
  const LayerOutput ref = single_gpu(b);
  EXPECT_EQ(ep.layer.hidden_states.shape(), ref.hidden_states.shape());
  if (ep.layer.hidden_states.shape() != ref.hidden_states.shape()) return {};
  const Compared c = compare(ep.layer, ref);
  EXPECT_GE(c.same_choices, T - std::max<int64_t>(1, T / 50)) << what;
  if (transfer == Transfer::bf16) {
    // bf16 rounding: the partial sums travel back as bf16 (one rounding more than the single-GPU layer).
    EXPECT_LE(c.max_rel, 1e-2) << what;
  } else {
    // The MPI path's documented fp8 tolerance (normwise relative error <= 0.125).
    EXPECT_LE(c.normwise, 0.125) << what;
  }
  std::printf("  %-40s %-4s/%-4s T %4lld: max rel %.2e, normwise %.2e, same choices %lld/%lld\n", what.c_str(),
              std::string(transfer_name(transfer)).c_str(), std::string(transfer_name(combine)).c_str(),
              static_cast<long long>(T), c.max_rel, c.normwise, static_cast<long long>(c.same_choices),
              static_cast<long long>(T));
  return c;
}

class CudaEpAllFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEpAllFamilies, EqualsSingleGpu) {
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const int R = g_comm->size();
  for (int64_t T : {1, 97, 700}) {
    const GpuBlock b = make_gpu_block(GetParam(), T, rng);
    const std::string what = GetParam() + " T " + std::to_string(T);
    expect_matches_single_gpu(b, contiguous_placement(64, R), Transfer::bf16, what + " contiguous");
    expect_matches_single_gpu(b, round_robin_placement(64, R), Transfer::bf16, what + " round-robin");
    expect_matches_single_gpu(b, contiguous_placement(64, R), Transfer::fp8, what + " contiguous");
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaEpAllFamilies,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3"),
                         [](const auto& info) { return info.param; });

TEST(CudaEp, ReplicasAndUnevenPlacement) {
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const int R = g_comm->size();
  const GpuBlock b = make_gpu_block("qwen3_moe", 300, rng, 8, 3);
  // Rank 0 holds every expert; the others each a replica of expert r-1 and of expert 7.
  std::vector<std::vector<int32_t>> ranks = {{0, 1, 2, 3, 4, 5, 6, 7}};
  for (int r = 1; r < R; ++r) ranks.push_back({r - 1, 7});
  expect_matches_single_gpu(b, make_placement(8, R, ranks), Transfer::bf16, "uneven with replicas");
  expect_matches_single_gpu(b, make_placement(8, R, ranks), Transfer::fp8, "uneven with replicas");
}

TEST(CudaEp, AllPairsToOneRankAndRanksWithoutExperts) {
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const int R = g_comm->size();
  const GpuBlock b = make_gpu_block("deepseek_v3", 130, rng);
  std::vector<std::vector<int32_t>> ranks(R);
  ranks[R - 1].resize(64);
  std::iota(ranks[R - 1].begin(), ranks[R - 1].end(), 0);
  expect_matches_single_gpu(b, make_placement(64, R, ranks), Transfer::bf16, "all experts on the last rank");
}

TEST(CudaEp, RanksWithNoTokens) {
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const GpuBlock b = make_gpu_block("mixtral", 1, rng, 8, 2);
  expect_matches_single_gpu(b, contiguous_placement(8, g_comm->size()), Transfer::bf16, "one token");
}

// An fp32 combine wire leaves only the order of fp32 additions between the EP and the single-GPU layer: on
// one rank none (bit-identical), on more far below the bf16 wire's rounding. T = 97 keeps both layers on
// the same kernels (mma.sync tiles of 16 rows: no fused decode kernel, no wgmma).
TEST_P(CudaEpAllFamilies, F32CombineCloserThanBf16) {
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const int R = g_comm->size();
  const GpuBlock b = make_gpu_block(GetParam(), 97, rng);
  const Placement placement = round_robin_placement(64, R);
  const Compared bf16_wire = expect_matches_single_gpu(b, placement, Transfer::bf16, GetParam() + " bf16 combine");
  const Compared f32_wire =
      expect_matches_single_gpu(b, placement, Transfer::bf16, GetParam() + " f32 combine", Transfer::f32);
  if (g_host->rank() != 0) return;
  EXPECT_LE(f32_wire.normwise, bf16_wire.normwise / 4) << GetParam();
  if (R == 1) {
    EXPECT_EQ(f32_wire.max_rel, 0.0) << GetParam() << ": one rank, fp32 partials: the same sums";
  }
}

// Wires the GPU path does not have are refused naming the wires that work: an f32 dispatch (the layer's
// input is bf16 already) and an fp8 combine.
TEST(CudaEp, UnsupportedWiresRefused) {
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const GpuBlock b = make_gpu_block("mixtral", 4, rng, 8, 2);
  const std::pair<EpWires, std::string> cases[] = {
      {{.dispatch = Transfer::f32}, "bf16 or fp8 dispatch wire"},
      {{.dispatch = Transfer::bf16, .combine = Transfer::fp8}, "bf16 or f32 combine wire"}};
  for (const auto& [wires, fix] : cases) {
    try {
      make_cuda_ep_layer(*g_comm, b.config, b.weights, contiguous_placement(8, g_comm->size()), wires, 4);
      ADD_FAILURE() << "no error; expected one naming " << fix;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fix), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace moe::ep
