// The whole CUDA layer against the CPU layer (the oracle) for every family, both paradigms, odd shapes,
// and replayed from a CUDA graph on fresh inputs.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "device_layer.h"
#include "graph_replay.h"
#include "core/float_convert.h"
#include "cuda/ops.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

// Runs both layers on x (rounded to bf16 for both) and compares tokens whose expert choices agree (an fp32
// router on two devices may split a near tie differently).
test::ChoiceAgreement run_both(const MoeConfig& config, const MoeWeights& weights, const Tensor& x_in,
                               LayerOptions options) {
  const Tensor x = x_in.to(DType::BF16).to_f32();
  const int64_t T = x.size(0), H = config.hidden_size, k = config.router.top_k;
  MoeLayer cpu_layer(config, weights, options);
  const LayerOutput want = cpu_layer.forward(x);

  MoeLayer gpu = test::cuda_layer(config, weights, {.max_tokens = T, .paradigm = options.paradigm,
                                     .capacity_factor = options.capacity_factor, .overflow = options.overflow});
  const Tensor xb = x.to(DType::BF16);
  test::Device<uint16_t> d_x(std::vector<uint16_t>(xb.data_as<uint16_t>(), xb.data_as<uint16_t>() + T * H));
  test::Device<float> d_out(T * H), d_weights(T * k);
  test::Device<int32_t> d_ids(T * k);
  test::forward_on_device(gpu, d_x.get(), T, d_out.get(), d_ids.get(), d_weights.get(), nullptr);
  const auto out = d_out.host();
  const auto ids = d_ids.host();
  const LoadCounts counts = gpu.read_counts(Stream::cuda(nullptr));

  const test::ChoiceAgreement c = test::compare_agreeing_tokens(out, ids, want);
  if (c.same_choices == T) {
    EXPECT_EQ(counts.tokens_per_expert, want.stats.tokens_per_expert);
    EXPECT_EQ(counts.dropped_per_expert, want.stats.dropped_per_expert);
  }
  return c;
}

TEST(CudaMoeLayer, EveryFamilyMatchesTheCpuLayer) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  for (const char* type : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3"})
    for (int64_t T : {1, 16, 97, 700}) {
      const MoeConfig config = parse_moe_config(test::cuda_case_config(type, 256, 128, 64, 6));
      const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
      test::expect_agreement(run_both(config, weights, rng.normal_tensor({T, 256}), {}),
                       std::string(type) + " T " + std::to_string(T));
    }
}

TEST(CudaMoeLayer, OddShapesAndDeepSeekV3Routing) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  struct Shape {
    int E, k;
    int64_t T;
  };
  for (Shape s : {Shape{256, 8, 3}, Shape{256, 8, 131}, Shape{3, 2, 17}, Shape{5, 1, 1}, Shape{7, 3, 61}}) {
    const MoeConfig config = parse_moe_config(test::cuda_case_config("deepseek_v3", 128, 64, s.E, s.k));
    const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
    test::expect_agreement(run_both(config, weights, rng.normal_tensor({s.T, 128}), {}),
                     "E " + std::to_string(s.E) + " T " + std::to_string(s.T));
  }
}

TEST(CudaMoeLayer, EveryTokenOnOneExpert) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const MoeConfig config = parse_moe_config(test::cuda_case_config("qwen3_moe", 128, 64, 16, 1));
  MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16);
  weights.router = Tensor::zeros(DType::F32, {16, 128});
  for (int64_t h = 0; h < 128; ++h) weights.router.data_as<float>()[5 * 128 + h] = 1.0f;
  Tensor x = rng.normal_tensor({40, 128});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::fabs(x.data_as<float>()[i]) + 0.1f;
  test::expect_agreement(run_both(config, weights, x, {}), "all on expert 5");
  test::expect_agreement(run_both(config, weights, x, {.paradigm = Paradigm::padded, .capacity_factor = 1.0}),
                   "all on expert 5, padded");
}

// describe_path names what forward runs: the fused decode kernel for the smallest batches, else the grouped
// GEMMs chosen by the policy (this shape is in no tuned table), with the kernel the policy names.
TEST(CudaMoeLayer, DescribesItsPath) {
  MOE_SKIP_WITHOUT_GPU();
  for (const char* var : {"MOE_DECODE_MAX_TOKENS", "MOE_TILE_ROWS", "MOE_GROUPED_GEMM", "MOE_WGMMA_PAIRS",
                          "MOE_WGMMA_COLUMN_PAIRS", "MOE_WGMMA_STAGED_EPILOGUE"})
    if (std::getenv(var) != nullptr) GTEST_SKIP() << var << " forces a path in the environment";
  test::TestRng rng;
  const MoeConfig config = parse_moe_config(test::cuda_case_config("qwen3_moe", 128, 64, 16, 4));
  const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16);
  const MoeLayer layer = test::cuda_layer(config, weights, {.max_tokens = 4096});
  EXPECT_EQ(layer.describe_path(1), "fused decode kernel");
  EXPECT_EQ(layer.describe_path(16), "mma.sync grouped GEMMs, 16-row tiles (policy)");  // 4 rows an expert
  const std::string prefill = layer.describe_path(4096);                               // 1024 rows an expert
  if (wgmma_grouped_gemm_available()) {
    EXPECT_EQ(prefill.rfind("wgmma grouped GEMMs, staged epilogue gate/up ", 0), 0u) << prefill;
    EXPECT_NE(prefill.find("(policy)"), std::string::npos) << prefill;
    EXPECT_NE(prefill.find("; clusters gate/up row-tile pairs, down row-tile pairs"), std::string::npos)
        << prefill;
    const std::string mid = layer.describe_path(512);  // 128 rows an expert, K 128: no column pairs
    EXPECT_NE(mid.find("; clusters gate/up none, down none"), std::string::npos) << mid;
  } else {
    EXPECT_EQ(prefill, "mma.sync grouped GEMMs, 128-row tiles (policy)");
  }
}

TEST(CudaMoeLayer, PaddedParadigmBothPolicies) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  for (const char* type : {"qwen2_moe", "deepseek_v3"})
    for (double factor : {0.5, 1.0, 4.0})
      for (OverflowPolicy policy : {OverflowPolicy::drop, OverflowPolicy::renormalize}) {
        const MoeConfig config = parse_moe_config(test::cuda_case_config(type, 128, 64, 16, 4));
        const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
        test::expect_agreement(run_both(config, weights, rng.normal_tensor({50, 128}),
                                  {.paradigm = Paradigm::padded, .capacity_factor = factor, .overflow = policy}),
                         std::string(type) + " factor " + std::to_string(factor));
      }
}

// The host path (MoeLayer::forward of host tensors on the CUDA stages) splits a batch larger than
// max_tokens into chunks: each chunk's output, routing and counters must be the device forward's of the same
// rows, bit for bit, and the statistics must cover the whole batch.
TEST(CudaMoeLayer, HostPathInChunksEqualsDeviceForwards) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const MoeConfig config = parse_moe_config(test::cuda_case_config("qwen2_moe", 128, 64, 16, 4));
  const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
  const int64_t T = 40, chunk = 16, H = config.hidden_size, k = config.router.top_k;
  const Tensor x = rng.normal_tensor({T, H}).to(DType::BF16);
  MoeLayer layer = test::cuda_layer(config, weights, {.max_tokens = chunk});
  const LayerOutput got = layer.forward(x);
  ASSERT_EQ(got.hidden_states.shape(), (std::vector<int64_t>{T, H}));
  std::vector<int64_t> tokens_per_expert(config.router.n_experts, 0);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    const uint16_t* rows = x.data_as<uint16_t>() + t0 * H;
    test::Device<uint16_t> d_x(std::vector<uint16_t>(rows, rows + n * H));
    test::Device<float> d_out(n * H), d_weights(n * k);
    test::Device<int32_t> d_ids(n * k);
    test::forward_on_device(layer, d_x.get(), n, d_out.get(), d_ids.get(), d_weights.get(), nullptr);
    const std::vector<float> out = d_out.host();
    const std::vector<int32_t> ids = d_ids.host();
    EXPECT_EQ(std::memcmp(out.data(), got.hidden_states.data_as<float>() + t0 * H, n * H * sizeof(float)), 0)
        << "chunk at token " << t0;
    EXPECT_EQ(std::memcmp(ids.data(), got.topk.ids.data_as<int32_t>() + t0 * k, n * k * sizeof(int32_t)), 0)
        << "chunk at token " << t0;
    const LoadCounts counts = layer.read_counts(Stream::cuda(nullptr));
    for (size_t e = 0; e < tokens_per_expert.size(); ++e) tokens_per_expert[e] += counts.tokens_per_expert[e];
  }
  EXPECT_EQ(got.stats.tokens_per_expert, tokens_per_expert);
  EXPECT_GT(got.timings.experts_ms, 0.0);
}

// T = 33: the fused router and the mma.sync GEMMs; T = 700: RouterGemm (cuBLAS) and the wgmma GEMMs with
// their work-unit queue, which each launch must leave zeroed for the next.
TEST(CudaMoeLayer, GraphReplayOnNewInputs) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const MoeConfig config = parse_moe_config(test::cuda_case_config("deepseek_v3", 256, 128, 64, 6));
  const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
  for (const int64_t T : {33, 700}) {
    SCOPED_TRACE("T " + std::to_string(T));
    test::expect_graph_replays_match(config, weights, T, rng);
  }
}

}  // namespace
}  // namespace moe::cuda
