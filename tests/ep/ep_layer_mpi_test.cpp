// The expert-parallel layer (the one MoeLayer over the dispatch / combine stages) against the single-rank
// layer (reference CPU experts), run under `mpirun -np R` for R in 1..4: every rank runs every test; rank 0
// compares the gathered output. Seeds are drawn on rank 0 and shared, so that all ranks build the same case.
#include <gtest/gtest.h>

#include <numeric>

#include "ep/data_parallel.h"
#include "ep/ep_layer.h"
#include "ep/rebalance.h"
#include "ep_block.h"
#include "random_moe_case.h"
#include "test_random.h"

namespace moe::ep {
namespace {

Communicator* g_comm = nullptr;

LayerOutput single_rank(const Block& b) {
  return MoeLayer(b.config, b.weights, {.cpu_experts = CpuExperts::reference}).forward(b.c.x);
}

// Runs the EP layer (collective) and, on rank 0, compares with the single-rank layer.
void expect_matches_single_rank(const Block& b, const Placement& placement, Transfer transfer = Transfer::f32,
                                double tolerance = 1e-5, CombineMode combine = CombineMode::partial_sums) {
  EpLayer layer = make_ep_layer(*g_comm, b.config, b.weights, placement, transfer, combine);
  const EpOutput ep = forward_data_parallel(layer, b.c.x);
  ASSERT_EQ(static_cast<int>(ep.ranks.size()), g_comm->size());
  int64_t tokens = 0, pairs = 0;
  for (const ExchangeStats& s : ep.ranks) tokens += s.tokens, pairs += s.pairs_served;
  EXPECT_EQ(tokens, b.c.x.size(0));
  EXPECT_EQ(pairs, b.c.x.size(0) * b.config.router.top_k);
  if (g_comm->rank() != 0) return;
  const LayerOutput ref = single_rank(b);
  const int64_t n_ids = ref.topk.ids.numel();
  ASSERT_EQ(ep.layer.topk.ids.shape(), ref.topk.ids.shape());
  EXPECT_TRUE(std::equal(ref.topk.ids.data_as<int32_t>(), ref.topk.ids.data_as<int32_t>() + n_ids,
                         ep.layer.topk.ids.data_as<int32_t>()));
  EXPECT_EQ(test::max_rel_error(ep.layer.topk.weights, ref.topk.weights), 0.0);
  const double err = test::max_rel_error(ep.layer.hidden_states, ref.hidden_states);
  EXPECT_LE(err, tolerance) << b.config.model_type << " transfer " << transfer_name(transfer);
  EXPECT_EQ(ep.layer.stats.tokens_per_expert, ref.stats.tokens_per_expert);
}

// Contiguous where E divides by R, else load-aware with a spare slot per rank (replicas).
Placement default_placement(const Block& b, int R) {
  const int E = b.config.router.n_experts;
  if (E % R == 0) return contiguous_placement(E, R);
  return load_aware_placement(std::vector<int64_t>(E, 1), R, (E + R - 1) / R + 1);
}

class EpAllFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(EpAllFamilies, EqualsSingleRank) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block(GetParam(), rng);
  expect_matches_single_rank(b, default_placement(b, g_comm->size()));
  expect_matches_single_rank(b, default_placement(b, g_comm->size()), Transfer::f32, 0.0,
                             CombineMode::per_pair);
  const int E = b.config.router.n_experts;
  if (E % g_comm->size() == 0) expect_matches_single_rank(b, round_robin_placement(E, g_comm->size()));
}

INSTANTIATE_TEST_SUITE_P(Families, EpAllFamilies, ::testing::ValuesIn(std::vector<std::string>(std::begin(test::kMoeModelTypes), std::end(test::kMoeModelTypes))),
                         [](const auto& info) { return info.param; });

TEST(Ep, UnevenPlacementWithReplicas) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("qwen3_moe", rng, {.tokens = 37, .experts = 5, .top_k = 3});
  const int R = g_comm->size();
  // Rank 0 holds every expert; the others each hold a replica of experts r-1 and 4: uneven, replicated.
  std::vector<std::vector<int32_t>> ranks = {{0, 1, 2, 3, 4}};
  for (int r = 1; r < R; ++r) ranks.push_back({r - 1, 4});
  expect_matches_single_rank(b, make_placement(5, R, ranks));
}

// A rebalanced placement with redundant slots (replicas of the hot experts on several ranks) and the
// per-pair combine: bit-identical to the single-rank layer, whichever replica serves a pair.
TEST(Ep, RebalancedReplicasPerPairCombineBitIdentical) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("deepseek_v3", rng, {.tokens = 41, .experts = 8, .top_k = 3});
  const int R = g_comm->size();
  std::vector<int64_t> load(8, 1);
  load[2] = 40, load[5] = 20;
  const Placement current = load_aware_placement(std::vector<int64_t>(8, 1), R, (8 + R - 1) / R);
  const RebalanceDecision d =
      rebalance_layer(load, current, {.n_ranks = R, .redundant_slots = R > 1 ? 3 : 0, .min_gain = 0});
  if (R > 1) EXPECT_GT(d.placement.n_replicas(2), 1);
  expect_matches_single_rank(b, d.placement, Transfer::f32, 0.0, CombineMode::per_pair);
}

TEST(Ep, AllPairsToOneRank) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("deepseek_v3", rng, {.tokens = 23});
  const int R = g_comm->size(), E = b.config.router.n_experts;
  std::vector<std::vector<int32_t>> ranks(R);
  ranks[R - 1].resize(E);
  std::iota(ranks[R - 1].begin(), ranks[R - 1].end(), 0);
  expect_matches_single_rank(b, make_placement(E, R, ranks));
}

TEST(Ep, RanksWithNoTokens) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("mixtral", rng, {.tokens = 1, .experts = 4, .top_k = 2});
  expect_matches_single_rank(b, load_aware_placement(std::vector<int64_t>(4, 1), g_comm->size(), 4));
}

TEST(Ep, Fp8AndBf16TransferWithinTolerance) {
  test::TestRng rng(shared_seed(*g_comm));
  // H above 128 so that rows span several fp8 scale blocks.
  const Block b = make_block("olmoe", rng, {.tokens = 40, .experts = 8, .top_k = 2});
  const Placement p = default_placement(b, g_comm->size());
  // NOTE: the documented tolerances (README): normwise relative error of the block output, fp8 e4m3
  // dispatch <= 0.125 (an e4m3 input is within 1/16 of its value; measured 0.01-0.065), bf16 dispatch
  // <= 0.02 (measured 0.001-0.003); combine stays fp32.
  expect_matches_single_rank(b, p, Transfer::fp8, 0.125);
  expect_matches_single_rank(b, p, Transfer::bf16, 0.02);
}

// Where every expert lives on one rank, each token's pairs travel in one copy and come back as one partial
// sum: the EP stages then compute exactly what the local stages do (the same router, experts, unpermute and
// shared experts), so the output is bit-identical to the single-rank layer, whichever rank a token starts on.
TEST(Ep, ExpertsOnOneRankBitIdenticalToLocalLayer) {
  test::TestRng rng(shared_seed(*g_comm));
  for (const char* family : {"qwen2_moe", "deepseek_v3"}) {
    const Block b = make_block(family, rng, {.tokens = 29});
    const int R = g_comm->size(), E = b.config.router.n_experts;
    std::vector<std::vector<int32_t>> ranks(R);
    ranks[0].resize(E);
    std::iota(ranks[0].begin(), ranks[0].end(), 0);
    EpLayer layer = make_ep_layer(*g_comm, b.config, b.weights, make_placement(E, R, ranks));
    const EpOutput ep = forward_data_parallel(layer, b.c.x);
    if (g_comm->rank() != 0) continue;
    const LayerOutput ref = single_rank(b);
    EXPECT_EQ(test::max_rel_error(ep.layer.hidden_states, ref.hidden_states), 0.0) << family;
    EXPECT_EQ(test::max_rel_error(ep.layer.topk.weights, ref.topk.weights), 0.0) << family;
  }
}

// The rank's MoeLayer is the whole EP layer: each rank running its own slice through it and gathering the
// rows by hand gives what forward_data_parallel gives.
TEST(Ep, RankLayerForwardIsTheDataParallelSlice) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("mixtral", rng, {.tokens = 19, .experts = 8});
  const Placement p = default_placement(b, g_comm->size());
  EpLayer layer = make_ep_layer(*g_comm, b.config, b.weights, p);
  const EpOutput whole = forward_data_parallel(layer, b.c.x);
  const TokenRange range = token_range(19, g_comm->rank(), g_comm->size());
  const LayerOutput mine = layer.layer->forward(b.c.x.narrow(0, range.begin, range.end - range.begin));
  EXPECT_EQ(mine.hidden_states.size(0), range.end - range.begin);
  EXPECT_EQ(layer.last_stats().tokens, range.end - range.begin);
  const Tensor rows = gather_rows(*g_comm, mine.hidden_states, 19, DType::F32);
  if (g_comm->rank() != 0) return;
  EXPECT_EQ(test::max_rel_error(rows, whole.layer.hidden_states), 0.0);
}

// forward_replicated leaves the same bytes on every rank: rank 0's gathered output, broadcast for the check.
TEST(Ep, ReplicatedOutputSameOnEveryRank) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("olmoe", rng, {.tokens = 21, .experts = 8});
  EpLayer layer = make_ep_layer(*g_comm, b.config, b.weights, default_placement(b, g_comm->size()), Transfer::bf16);
  ExchangeStats totals;
  const LayerOutput out = forward_replicated(layer, b.c.x, &totals);
  forward_replicated(layer, b.c.x, &totals);
  EXPECT_EQ(totals.tokens, 2 * (token_range(21, g_comm->rank(), g_comm->size()).end -
                                token_range(21, g_comm->rank(), g_comm->size()).begin));
  ASSERT_EQ(out.hidden_states.shape(), (std::vector<int64_t>{21, b.config.hidden_size}));
  // Every rank's bytes against rank 0's: the sum over ranks of |mine - rank 0's| bit patterns is zero.
  const int64_t n = out.hidden_states.numel();
  std::vector<int64_t> bits(n);
  for (int64_t i = 0; i < n; ++i) bits[i] = out.hidden_states.data_as<int32_t>()[i];
  std::vector<int64_t> sum = bits;
  g_comm->allreduce_sum(sum);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], bits[i] * g_comm->size()) << "element " << i;
  if (g_comm->rank() != 0) return;
  EXPECT_LE(test::max_rel_error(out.hidden_states, single_rank(b).hidden_states), 0.02);
}

TEST(Ep, PlacementForOtherRankCountRejected) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("mixtral", rng, {.experts = 8});
  const int R = g_comm->size();
  try {
    make_ep_layer(*g_comm, b.config, b.weights, contiguous_placement(8, R == 4 ? 2 : 4));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -np"), std::string::npos) << e.what();
  }
  try {
    make_ep_layer(*g_comm, b.config, b.weights, contiguous_placement(4, R == 4 ? 4 : 1));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model has 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe::ep

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<moe::ep::Communicator> comm = moe::ep::make_mpi_communicator();
  moe::ep::g_comm = comm.get();
  // Only rank 0 prints the progress; every rank still reports its own failures through its exit code.
  if (comm->rank() != 0) delete ::testing::UnitTest::GetInstance()->listeners().Release(
      ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  return RUN_ALL_TESTS();
}
