// Elastic expert parallelism on GPUs under `mpirun -np R`, one process per GPU: expert slots migrated
// device to device to a new placement bit for bit, the layer rebuilt on the migrated slots at the new epoch
// against the single-GPU layer, a rebalance under skewed routing lowering the measured rank max/mean, and a
// placement that leaves an expert on no rank refused before anything moves. At R = 1 a migration moves
// nothing between ranks (the rank reorders its own slots on its GPU); the test that needs several ranks'
// loads skips below 2 GPUs. Skips (every rank alike) without NCCL or a GPU per rank (cuda_ep_main.cpp).
//
// Tolerance of the rebuilt layer against the single-GPU layer, over tokens whose expert choices agree:
// with the bf16 combine wire max |a - b| / max |b| <= 1e-2 (each copy's partial sum is rounded to bf16 once
// on its way back, one rounding more than one GPU); with the f32 combine wire only the order of fp32
// additions differs, so at R = 1 within 1e-6 (measured 1.0e-7 to 8.1e-7). Against a layer uploaded
// from the host at the same placement the rebuilt one is bit-identical at any R (same weights, same kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda_ep_case.h"
#include "ep/data_parallel.h"
#include "ep/device_expert_slots.h"
#include "ep/ep_layer.h"
#include "ep/expert_migration.h"
#include "ep/rebalance.h"
#include "gpu_skip.h"
#include "test_random.h"

namespace moe::ep {
namespace {

constexpr EpWires kBf16Wires{.dispatch = Transfer::bf16, .combine = Transfer::bf16};

// Contiguous where the experts divide over the ranks, else spread evenly (the elastic start, as the engine).
Placement start_placement(int E, int R) {
  return E % R == 0 ? contiguous_placement(E, R) : load_aware_placement(std::vector<int64_t>(E, 1), R, (E + R - 1) / R);
}

// The placement a migration goes to: at R = 1 rank 0's experts in reverse slot order (nothing crosses ranks,
// every slot moves on the GPU); at R > 1 a rebalance towards a skewed load with replicas (real moves).
Placement moved_placement(const Placement& from) {
  const int R = from.n_ranks, E = from.n_experts;
  if (R == 1) {
    std::vector<int32_t> reversed = from.rank_experts[0];
    std::reverse(reversed.begin(), reversed.end());
    return make_placement(E, 1, {reversed});
  }
  std::vector<int64_t> load(E, 3);
  load[0] = 90, load[E - 1] = 40;
  const RebalanceDecision d = rebalance_layer(load, from, {.n_ranks = R, .redundant_slots = 2, .min_gain = 0});
  EXPECT_TRUE(d.move);
  EXPECT_GT(d.moved_experts, 0);
  return d.placement;
}

std::vector<uint8_t> device_bytes(const Tensor& t) {
  std::vector<uint8_t> host(t.nbytes());
  if (!host.empty()) MOE_CUDA_CHECK(cudaMemcpy(host.data(), t.data(), host.size(), cudaMemcpyDeviceToHost));
  return host;
}

bool same_slots(const DeviceExpertSlots& a, const DeviceExpertSlots& b) {
  return a.w13.shape() == b.w13.shape() && a.w2.shape() == b.w2.shape() && device_bytes(a.w13) == device_bytes(b.w13) &&
         device_bytes(a.w2) == device_bytes(b.w2);
}

int64_t summed(int64_t mine) {
  int64_t v[1] = {mine};
  g_host->allreduce_sum(v);
  return v[0];
}

DeviceMigration migrate(const EpLayer& layer, const Placement& from, const Placement& to) {
  const DeviceExpertSlots& slots = layer.device_slots;
  return migrate_device_experts(*g_comm, from, to, slots, slots.w13.size(2), slots.w2.size(2), nullptr);
}

// The router and shared experts of `weights` without its experts: what a rebuilt layer may read.
MoeWeights without_experts(MoeWeights weights) {
  weights.experts.assign(weights.experts.size(), SwigluWeights{});
  return weights;
}

// max / mean of the pairs each rank served.
double served_max_over_mean(const EpOutput& out) {
  double max = 0, sum = 0;
  for (const ExchangeStats& s : out.ranks) max = std::max(max, double(s.pairs_served)), sum += double(s.pairs_served);
  return sum > 0 ? max / (sum / double(out.ranks.size())) : 1.0;
}

// Every slot of the new placement holds the expert's weights bit for bit (against the same experts uploaded
// from the host at that placement), the old slots are untouched, and the bytes add up over the ranks.
// I 96 pads to 128: the padding travels too and stays zero.
class CudaMigration : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaMigration, MovesEveryExpertBitForBit) {
  MOE_SKIP_WITHOUT_GPU();
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const int R = g_comm->size(), me = g_comm->rank(), E = 16;
  const GpuBlock b = make_gpu_block("qwen3_moe", 4, rng, E, 4, GetParam());
  const Placement from = start_placement(E, R);
  const Placement to = moved_placement(from);
  const EpLayer old_layer = make_cuda_ep_layer(*g_comm, b.config, b.weights, from, kBf16Wires, 4);
  const std::vector<uint8_t> old_w13 = device_bytes(old_layer.device_slots.w13);

  const DeviceMigration m = migrate(old_layer, from, to);
  const EpLayer uploaded = make_cuda_ep_layer(*g_comm, b.config, b.weights, to, kBf16Wires, 4);
  // NOTE: EXPECT, not ASSERT, wherever a rank could leave alone: the others would wait for it in a collective.
  EXPECT_EQ(m.slots.count(), static_cast<int64_t>(to.rank_experts[me].size()));
  EXPECT_TRUE(same_slots(m.slots, uploaded.device_slots)) << "rank " << me;
  EXPECT_EQ(device_bytes(old_layer.device_slots.w13), old_w13) << "the old slots were written";
  EXPECT_NE(m.slots.w13.data(), old_layer.device_slots.w13.data()) << "the new slots must be fresh buffers";

  const int64_t slot_bytes = static_cast<int64_t>(m.slots.w13.nbytes() + m.slots.w2.nbytes()) /
                             std::max<int64_t>(m.slots.count(), 1);
  int64_t received = 0;
  for (const ExpertMove& move : plan_moves(from, to)) received += move.to_rank == me ? slot_bytes : 0;
  EXPECT_EQ(m.bytes_received, received);
  EXPECT_EQ(summed(m.bytes_sent), summed(m.bytes_received));
  if (R == 1) {
    EXPECT_EQ(m.bytes_sent, 0);
    EXPECT_EQ(m.bytes_received, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Intermediate, CudaMigration, ::testing::Values(int64_t{128}, int64_t{96}),
                         [](const auto& info) { return "I" + std::to_string(info.param); });

// The layer of the new epoch, built on the migrated slots and the router and shared experts alone, against
// the single-GPU layer (the tolerance above) and against the layer uploaded from the host at its placement
// (bit for bit). T 97: both layers on the same mma.sync kernels, as in cuda_ep_mpi_test.
class CudaElasticLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaElasticLayer, RebuiltOnMigratedSlotsEqualsSingleGpu) {
  MOE_SKIP_WITHOUT_GPU();
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const int R = g_comm->size(), E = 16;
  const GpuBlock b = make_gpu_block(GetParam(), 97, rng, E, 4);
  const Placement from = start_placement(E, R);
  const Placement to = moved_placement(from);
  for (const EpWires wires : {kBf16Wires, EpWires{.dispatch = Transfer::bf16, .combine = Transfer::f32}}) {
    const std::string what = GetParam() + " combine " + std::string(transfer_name(wires.combine));
    EpLayer old_layer = make_cuda_ep_layer(*g_comm, b.config, b.weights, from, wires, 97);
    DeviceMigration m = migrate(old_layer, from, to);
    EpLayer rebuilt = make_cuda_ep_layer(*g_comm, b.config, without_experts(b.weights), to, m.slots, wires, 97);
    EXPECT_EQ(rebuilt.device_slots.w13.data(), m.slots.w13.data()) << "the layer must share the slots, not copy";
    const EpOutput ep = forward_data_parallel(rebuilt, b.x);
    EpLayer uploaded = make_cuda_ep_layer(*g_comm, b.config, b.weights, to, wires, 97);
    const EpOutput ep_uploaded = forward_data_parallel(uploaded, b.x);
    // The old epoch's layer still serves after the migration, on its own slots.
    const EpOutput ep_old = forward_data_parallel(old_layer, b.x);
    int64_t pairs = 0;
    for (const ExchangeStats& s : ep.ranks) pairs += s.pairs_served;
    EXPECT_EQ(pairs, 97 * 4) << what;
    if (g_host->rank() != 0) continue;
    const Tensor& out = ep.layer.hidden_states;
    EXPECT_TRUE(out.shape() == ep_uploaded.layer.hidden_states.shape() &&
                std::memcmp(out.data(), ep_uploaded.layer.hidden_states.data(), out.nbytes()) == 0)
        << what << ": the rebuilt layer differs from the uploaded one";
    const LayerOutput ref = single_gpu(b);
    const Compared c = compare(ep.layer, ref), c_old = compare(ep_old.layer, ref);
    EXPECT_GE(c.same_choices, 97 - 2) << what;
    EXPECT_LE(c.max_rel, 1e-2) << what;
    EXPECT_LE(c_old.max_rel, 1e-2) << what << " (the old layer)";
    if (R == 1 && wires.combine == Transfer::f32) {
      // NOTE: not bitwise: the combine adds a token's fp32 partials in another order than the single-GPU
      // layer's unpermute (1.0e-7 to 8.1e-7 relative on the H200, 2026-12-03).
      EXPECT_LE(c.max_rel, 1e-6) << what << ": one rank, fp32 partials: the single-GPU layer's sums but for order";
    }
    std::printf("  %-28s R %d: max rel %.2e, normwise %.2e, same choices %lld/97\n", what.c_str(), R, c.max_rel,
                c.normwise, static_cast<long long>(c.same_choices));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaElasticLayer, ::testing::Values("qwen3_moe", "deepseek_v3", "qwen2_moe"),
                         [](const auto& info) { return info.param; });

// DeepSeek-V3's correction bias steers selection only: a large one on experts 0 and 1 puts them in every
// token's top-k, so the rank holding them serves far more pairs. The rebalance from the measured load
// (replicas of the hot experts) lowers the served max/mean, measured again after the migration.
TEST(CudaElastic, RebalanceUnderSkewLowersRankMaxOverMean) {
  MOE_SKIP_WITHOUT_GPU();
  MOE_SKIP_WITHOUT_GPU_RANKS();
  const int R = g_comm->size(), E = 16, k = 4;
  if (R < 2) GTEST_SKIP() << "rank loads need at least 2 GPUs (mpirun -np 2 on 2 GPUs)";
  test::TestRng rng(shared_seed());
  GpuBlock b = make_gpu_block("deepseek_v3", 256, rng, E, k);
  std::vector<float> bias(E, 0.0f);
  bias[0] = bias[1] = 1.0f;
  b.weights.correction_bias = Tensor::from_f32({E}, bias);
  const Placement from = start_placement(E, R);
  EpLayer before = make_cuda_ep_layer(*g_comm, b.config, b.weights, from, kBf16Wires, 256);
  const EpOutput out_before = forward_data_parallel(before, b.x);

  // The load from the routing rank 0 gathered, shared with every rank.
  std::vector<int64_t> load(E, 0);
  if (g_host->rank() == 0)
    for (int64_t i = 0; i < out_before.layer.topk.ids.numel(); ++i) ++load[out_before.layer.topk.ids.data_as<int32_t>()[i]];
  g_host->allreduce_sum(load);
  EXPECT_EQ(std::accumulate(load.begin(), load.end(), int64_t{0}), 256 * k);
  const RebalanceDecision d =
      rebalance_layer(load, from, {.n_ranks = R, .redundant_slots = 2 * (R - 1), .min_gain = 0});
  // Every rank decides the same from the same load, so an ASSERT leaves on all of them alike.
  ASSERT_TRUE(d.move) << "predicted max/mean " << d.max_over_mean_before << " -> " << d.max_over_mean_after;
  check_active_coverage(d.placement, R);

  DeviceMigration m = migrate(before, from, d.placement);
  EXPECT_GT(summed(m.bytes_sent), 0);
  EpLayer after = make_cuda_ep_layer(*g_comm, b.config, without_experts(b.weights), d.placement, m.slots, kBf16Wires, 256);
  const EpOutput out_after = forward_data_parallel(after, b.x);
  const double measured_before = served_max_over_mean(out_before), measured_after = served_max_over_mean(out_after);
  EXPECT_GT(measured_before, 1.25) << "the bias did not skew the load";
  EXPECT_LT(measured_after, measured_before - 0.25);
  EXPECT_LT(d.max_over_mean_after, d.max_over_mean_before);
  if (g_host->rank() == 0)
    std::printf("  served max/mean %.3f -> %.3f (predicted %.3f -> %.3f), %d experts moved\n", measured_before,
                measured_after, d.max_over_mean_before, d.max_over_mean_after, d.moved_experts);
}

// A placement that leaves an expert on no rank is refused on every rank before any copy, and the running
// layer serves on as before. (make_placement refuses it too; one put together by hand reaches the migration.)
TEST(CudaElastic, PlacementLeavingAnExpertUnheldRefused) {
  MOE_SKIP_WITHOUT_GPU();
  MOE_SKIP_WITHOUT_GPU_RANKS();
  test::TestRng rng(shared_seed());
  const int R = g_comm->size(), E = 8;
  const GpuBlock b = make_gpu_block("mixtral", 33, rng, E, 2);
  const Placement from = start_placement(E, R);
  Placement unheld;
  unheld.n_experts = E;
  unheld.n_ranks = R;
  unheld.rank_experts = from.rank_experts;
  for (auto& held : unheld.rank_experts) held.erase(std::remove(held.begin(), held.end(), E - 1), held.end());
  EXPECT_THROW(make_placement(E, R, unheld.rank_experts), Error);

  EpLayer layer = make_cuda_ep_layer(*g_comm, b.config, b.weights, from, kBf16Wires, 33);
  const EpOutput first = forward_data_parallel(layer, b.x);
  const std::vector<uint8_t> w13 = device_bytes(layer.device_slots.w13);
  try {
    migrate(layer, from, unheld);
    ADD_FAILURE() << "no error; expected one naming expert " << E - 1;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert " + std::to_string(E - 1) + " on no rank"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(device_bytes(layer.device_slots.w13), w13);
  const EpOutput again = forward_data_parallel(layer, b.x);
  if (g_host->rank() != 0) return;
  EXPECT_EQ(std::memcmp(first.layer.hidden_states.data(), again.layer.hidden_states.data(),
                        first.layer.hidden_states.nbytes()),
            0);
}

}  // namespace
}  // namespace moe::ep
