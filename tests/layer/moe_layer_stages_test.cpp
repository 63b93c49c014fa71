// The modular seam of MoeLayer: a bundle assembled by hand runs its stages in order, a stage swapped for a
// test's own changes the output exactly as the test predicts, and the device-style forward (preallocated
// outputs, a Stream) equals the host forward on the CPU stages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "cpu/ops.h"
#include "moe/layer/cpu_stages.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"
#include "random_moe_case.h"
#include "test_random.h"

namespace moe {
namespace {

// A Mixtral-shaped block (no shared experts) with random F32 weights.
struct Block {
  MoeConfig config;
  MoeWeights weights;
  Tensor x;  // [T, H] F32
};

Block random_block(test::TestRng& rng, int64_t tokens) {
  const test::MoeCase c = test::random_moe_case("mixtral", rng, {.tokens = tokens});
  Block b{.config = parse_moe_config(c.config), .weights = {}, .x = c.x.to_f32()};
  b.weights = random_moe_weights(b.config, rng.engine()(), DType::F32);
  return b;
}

// The local finalize, then every output doubled (exact in floating point).
class DoublingFinalize final : public Finalize {
 public:
  void finalize(const Tensor& x, const RouterOutput& routed, const Tensor& expert_out, const ExpertBatch& batch,
                Tensor& out, Stream stream) override {
    local_->finalize(x, routed, expert_out, batch, out, stream);
    float* p = out.data_as<float>();
    for (int64_t i = 0; i < out.numel(); ++i) p[i] *= 2.0f;
    ++calls;
  }
  int calls = 0;

 private:
  std::unique_ptr<Finalize> local_ = make_local_finalize();
};

// Sends every token to expert 0 alone with weight 1, whatever the router chose.
class AllToExpertZeroPrepare final : public Prepare {
 public:
  explicit AllToExpertZeroPrepare(int n_experts) : local_(make_local_contiguous_prepare(n_experts)) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk, Stream stream) override {
    const int64_t T = x.size(0), k = topk.ids.size(1);
    TopK forced{.ids = Tensor::zeros(DType::I32, {T, 1}), .weights = Tensor::empty(DType::F32, {T, 1})};
    for (int64_t t = 0; t < T; ++t) forced.weights.data_as<float>()[t] = 1.0f;
    ExpertBatch batch = local_->prepare(x, forced, stream);
    // The combine reads pair (t, j) for the router's k choices: only j = 0 is kept.
    Tensor pair_rows = Tensor::empty(DType::I32, {T, k});
    Tensor pair_weights = Tensor::zeros(DType::F32, {T, k});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        pair_rows.data_as<int32_t>()[t * k + j] = j == 0 ? batch.pair_rows.data_as<int32_t>()[t] : -1;
        if (j == 0) pair_weights.data_as<float>()[t * k] = 1.0f;
      }
    batch.pair_rows = pair_rows;
    batch.pair_weights = pair_weights;
    return batch;
  }

 private:
  std::unique_ptr<Prepare> local_;
};

LayerStages reference_stages(const Block& b) {
  LayerStages s;
  s.router = make_cpu_router(b.config, b.weights, /*fast=*/false);
  s.prepare = make_local_contiguous_prepare(b.config.router.n_experts);
  s.experts = make_cpu_reference_experts(b.weights.experts);
  s.finalize = make_local_finalize();
  return s;
}

TEST(MoeLayerStages, HandAssembledBundleEqualsTheReferenceLayer) {
  test::TestRng rng;
  const Block b = random_block(rng, 23);
  const LayerOutput want = MoeLayer(b.config, b.weights, {.cpu_experts = CpuExperts::reference}).forward(b.x);
  const LayerOutput got = MoeLayer(b.config, reference_stages(b)).forward(b.x);
  ASSERT_EQ(got.hidden_states.shape(), want.hidden_states.shape());
  EXPECT_EQ(std::memcmp(got.hidden_states.data(), want.hidden_states.data(), want.hidden_states.nbytes()), 0);
  EXPECT_EQ(std::memcmp(got.topk.ids.data(), want.topk.ids.data(), want.topk.ids.nbytes()), 0);
  EXPECT_EQ(got.stats.tokens_per_expert, want.stats.tokens_per_expert);
}

TEST(MoeLayerStages, SwappedFinalizeDoublesTheOutput) {
  test::TestRng rng;
  const Block b = random_block(rng, 31);
  const LayerOutput want = MoeLayer(b.config, reference_stages(b)).forward(b.x);
  LayerStages stages = reference_stages(b);
  auto finalize = std::make_unique<DoublingFinalize>();
  const DoublingFinalize* seen = finalize.get();
  stages.finalize = std::move(finalize);
  MoeLayer layer(b.config, std::move(stages));
  const LayerOutput got = layer.forward(b.x);
  EXPECT_EQ(seen->calls, 1);
  for (int64_t i = 0; i < want.hidden_states.numel(); ++i)
    ASSERT_EQ(got.hidden_states.data_as<float>()[i], 2.0f * want.hidden_states.data_as<float>()[i]) << "element " << i;
}

TEST(MoeLayerStages, SwappedPrepareRunsExpertZeroOnEveryToken) {
  test::TestRng rng;
  const Block b = random_block(rng, 17);
  LayerStages stages = reference_stages(b);
  stages.prepare = std::make_unique<AllToExpertZeroPrepare>(b.config.router.n_experts);
  MoeLayer layer(b.config, std::move(stages));
  const LayerOutput got = layer.forward(b.x);
  const Tensor want = cpu::swiglu_mlp(b.x, b.weights.experts[0]);  // [T, H]
  double worst = 0, scale = 1e-30;
  for (int64_t i = 0; i < want.numel(); ++i) {
    worst = std::max(worst, double(std::fabs(got.hidden_states.data_as<float>()[i] - want.data_as<float>()[i])));
    scale = std::max(scale, double(std::fabs(want.data_as<float>()[i])));
  }
  EXPECT_LE(worst / scale, 1e-6);
  // The counters are the swapped prepare's: every token on expert 0.
  const LoadCounts counts = layer.read_counts();
  ASSERT_EQ(counts.tokens_per_expert.size(), size_t(b.config.router.n_experts));
  EXPECT_EQ(counts.tokens_per_expert[0], 17);
  for (size_t e = 1; e < counts.tokens_per_expert.size(); ++e) EXPECT_EQ(counts.tokens_per_expert[e], 0);
}

// The entry point device callers use (outputs preallocated, a Stream) on the CPU stages: the same result
// as the host forward, written into the caller's tensors, every element of which it overwrites.
TEST(MoeLayerStages, PreallocatedForwardEqualsTheHostForward) {
  test::TestRng rng;
  for (CpuExperts experts : {CpuExperts::reference, CpuExperts::fast}) {
    const Block b = random_block(rng, 19);
    MoeLayer layer(b.config, b.weights, {.cpu_experts = experts});
    const LayerOutput want = layer.forward(b.x);
    const int64_t T = b.x.size(0), H = b.config.hidden_size, k = b.config.router.top_k;
    TopK topk{.ids = Tensor::empty(DType::I32, {T, k}), .weights = Tensor::empty(DType::F32, {T, k})};
    Tensor out = Tensor::empty(DType::F32, {T, H});
    std::memset(out.data(), 0xff, out.nbytes());  // NaN junk: an unwritten element shows
    layer.forward(b.x, topk, out, Stream());
    EXPECT_EQ(std::memcmp(out.data(), want.hidden_states.data(), out.nbytes()), 0);
    EXPECT_EQ(std::memcmp(topk.ids.data(), want.topk.ids.data(), topk.ids.nbytes()), 0);
    EXPECT_EQ(layer.read_counts().tokens_per_expert, want.stats.tokens_per_expert);
    EXPECT_EQ(layer.device(), Device::cpu);
  }
}

TEST(MoeLayerStages, IncompleteBundlesAreRefused) {
  test::TestRng rng;
  const Block b = random_block(rng, 4);
  LayerStages no_finalize = reference_stages(b);
  no_finalize.finalize = nullptr;
  EXPECT_THROW(MoeLayer(b.config, std::move(no_finalize)), Error);
  LayerStages no_router = reference_stages(b);
  no_router.router = nullptr;
  EXPECT_THROW(MoeLayer(b.config, std::move(no_router)), Error);
  LayerStages both = reference_stages(b);
  both.fused = make_cpu_fast_experts(b.weights.experts, quant::WeightFormat::bf16);
  EXPECT_THROW(MoeLayer(b.config, std::move(both)), Error);
}

}  // namespace
}  // namespace moe
