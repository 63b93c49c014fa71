// Elastic expert parallelism under mpirun: the load window summed over the ranks, expert weights migrated
// to a rebalanced or rescaled placement over the communicator, the EP layer on the migrated weights
// bit-identical to the single-rank layer, and the switch agreed by every rank or none.
#include <gtest/gtest.h>

#include <cstring>

#include "ep/data_parallel.h"
#include "ep/ep_layer.h"
#include "ep/expert_migration.h"
#include "ep/load_window.h"
#include "ep/rebalance.h"
#include "ep_block.h"
#include "random_moe_case.h"
#include "test_random.h"

namespace moe::ep {
namespace {

Communicator* g_comm = nullptr;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// This rank's slots of `p` as fresh copies (so that nothing but the transport can give a rank another's).
std::vector<SwigluWeights> own_copies(const Block& b, const Placement& p) {
  std::vector<SwigluWeights> slots;
  for (int32_t e : p.rank_experts[g_comm->rank()]) {
    SwigluWeights w;
    for (auto [src, dst] : {std::pair{&b.weights.experts[e].gate, &w.gate},
                            {&b.weights.experts[e].up, &w.up},
                            {&b.weights.experts[e].down, &w.down}}) {
      *dst = Tensor::empty(src->dtype(), src->shape());
      std::memcpy(dst->data(), src->data(), src->nbytes());
    }
    slots.push_back(std::move(w));
  }
  return slots;
}

// Migrates from `from` to `to`, checks every new slot's bytes (kept slots share the old tensors), then runs
// the EP layer on the migrated weights alone against the single-rank layer: bit-identical (per-pair combine).
void migrate_and_check(const Block& b, const Placement& from, const Placement& to) {
  const int me = g_comm->rank();
  const std::vector<SwigluWeights> current = own_copies(b, from);
  const ExpertShape shape{
      .hidden = b.config.hidden_size, .intermediate = b.config.expert_intermediate_size, .dtype = DType::F32};
  const Migration m = migrate_experts(*g_comm, from, to, current, shape);
  ASSERT_EQ(m.slots.size(), to.rank_experts[me].size());
  int64_t received = 0;
  for (size_t s = 0; s < m.slots.size(); ++s) {
    const int e = to.rank_experts[me][s];
    EXPECT_TRUE(same_bytes(m.slots[s].gate, b.weights.experts[e].gate)) << "expert " << e;
    EXPECT_TRUE(same_bytes(m.slots[s].up, b.weights.experts[e].up)) << "expert " << e;
    EXPECT_TRUE(same_bytes(m.slots[s].down, b.weights.experts[e].down)) << "expert " << e;
    const auto& old = from.rank_experts[me];
    const auto kept = std::find(old.begin(), old.end(), e);
    if (kept != old.end())
      EXPECT_EQ(m.slots[s].gate.data(), current[kept - old.begin()].gate.data());
    else
      received += static_cast<int64_t>(3 * m.slots[s].gate.nbytes());
  }
  EXPECT_EQ(m.bytes_received, received);

  MoeWeights weights = b.weights;
  for (auto& w : weights.experts) w = {};
  for (size_t s = 0; s < m.slots.size(); ++s) weights.experts[to.rank_experts[me][s]] = m.slots[s];
  EpLayer layer = make_ep_layer(*g_comm, b.config, weights, to, Transfer::f32, CombineMode::per_pair);
  const EpOutput ep = forward_data_parallel(layer, b.c.x);
  if (me != 0) return;
  const LayerOutput ref =
      MoeLayer(b.config, b.weights, {.cpu_experts = CpuExperts::reference}).forward(b.c.x);
  EXPECT_EQ(test::max_rel_error(ep.layer.hidden_states, ref.hidden_states), 0.0);
}

TEST(Migration, RebalancedPlacementWithReplicas) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("qwen3_moe", rng, {.tokens = 33, .experts = 8, .top_k = 2});
  const int R = g_comm->size();
  const Placement from = load_aware_placement(std::vector<int64_t>(8, 1), R, (8 + R - 1) / R);
  std::vector<int64_t> load(8, 2);
  load[7] = 50, load[6] = 30;
  const RebalanceDecision d =
      rebalance_layer(load, from, {.n_ranks = R, .redundant_slots = R > 1 ? 2 : 0, .min_gain = 0});
  if (R > 1) EXPECT_GT(d.moved_experts, 0);
  EXPECT_EQ(static_cast<int>(plan_moves(from, d.placement).size()), d.moved_experts);
  migrate_and_check(b, from, d.placement);
}

TEST(Migration, ScaleDownAndBackUp) {
  test::TestRng rng(shared_seed(*g_comm));
  const Block b = make_block("deepseek_v3", rng, {.tokens = 27, .experts = 8, .top_k = 3});
  const int R = g_comm->size();
  if (R < 2) GTEST_SKIP() << "scaling needs at least 2 ranks";
  const std::vector<int64_t> load(8, 5);
  const Placement all = load_aware_placement(load, R, (8 + R - 1) / R);
  const RebalanceDecision down = rebalance_layer(load, all, {.n_ranks = R, .active_ranks = R - 1});
  ASSERT_TRUE(down.move);
  EXPECT_TRUE(down.placement.rank_experts[R - 1].empty());
  check_active_coverage(down.placement, R - 1);
  migrate_and_check(b, all, down.placement);
  // Back to every rank: the rejoining rank receives its experts before it serves.
  std::vector<int64_t> skew = load;
  skew[0] = 40;
  const RebalanceDecision up = rebalance_layer(skew, down.placement, {.n_ranks = R, .min_gain = 0});
  ASSERT_TRUE(up.move);
  EXPECT_FALSE(up.placement.rank_experts[R - 1].empty());
  migrate_and_check(b, down.placement, up.placement);
}

TEST(Migration, SwitchAgreedByEveryRankOrNone) {
  EXPECT_TRUE(agree_switch(*g_comm, true));
  EXPECT_EQ(agree_switch(*g_comm, g_comm->rank() != g_comm->size() - 1), false);
}

TEST(LoadWindowMpi, SummedAcrossRanksAndSteps) {
  const int R = g_comm->size(), me = g_comm->rank(), E = 5, W = 4;
  LoadWindow w(2, E, W);
  // Step s on rank r: layer 0 routes one pair to expert (r + s) mod E, layer 1 r + 1 pairs to expert 0.
  const int n_steps = 6;
  for (int s = 0; s < n_steps; ++s) {
    w.record(0, std::vector<int32_t>{(me + s) % E});
    w.record(1, std::vector<int32_t>(me + 1, 0));
    w.end_step();
  }
  std::vector<int64_t> want0(E, 0);
  for (int r = 0; r < R; ++r)
    for (int s = n_steps - W; s < n_steps; ++s) ++want0[(r + s) % E];
  const std::vector<std::vector<int64_t>> sum = w.summed(*g_comm);
  ASSERT_EQ(sum.size(), 2u);
  EXPECT_EQ(sum[0], want0);
  EXPECT_EQ(sum[1][0], int64_t{W} * R * (R + 1) / 2);
  // The local window is untouched by the collective.
  EXPECT_EQ(w.local(1)[0], int64_t{W} * (me + 1));
}

}  // namespace
}  // namespace moe::ep

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<moe::ep::Communicator> comm = moe::ep::make_mpi_communicator();
  moe::ep::g_comm = comm.get();
  if (comm->rank() != 0)
    delete ::testing::UnitTest::GetInstance()->listeners().Release(
        ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  return RUN_ALL_TESTS();
}
