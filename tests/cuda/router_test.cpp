// The CUDA router against its CPU twin (routing::route) on fresh random logits, every method.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <tuple>

#include "core/float_convert.h"
#include "moe/core/tensor.h"

#include "cuda_test_util.h"
#include "cuda/device_buffer.h"
#include "cuda/ops.h"
#include "cuda/router_gemm.h"
#include "moe/routing/router.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

using routing::RouterConfig;
using routing::RoutingMethod;

// The device's choices equal the CPU router's and its weights agree to 1e-5 relative (the first weight that
// does not is a fatal failure: call through ASSERT_NO_FATAL_FAILURE).
void expect_same_routing(const test::Device<int32_t>& ids, const test::Device<float>& weights,
                         const std::vector<int32_t>& want_ids, const std::vector<float>& want_weights) {
  EXPECT_EQ(ids.host(), want_ids);
  const auto got = weights.host();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want_weights[i], 1e-5 * std::max(1.0f, std::fabs(want_weights[i]))) << i;
}

TEST(CudaRouter, MatchesTheCpuRouterForEveryMethod) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const RouterConfig configs[] = {
      {.method = RoutingMethod::softmax_topk, .n_experts = 8, .top_k = 2, .norm_topk_prob = true},
      {.method = RoutingMethod::softmax_topk, .n_experts = 60, .top_k = 4},
      {.method = RoutingMethod::softmax_topk, .n_experts = 128, .top_k = 8, .norm_topk_prob = true},
      {.method = RoutingMethod::group_limited_greedy, .n_experts = 160, .top_k = 6, .routed_scaling_factor = 16.0f,
       .n_group = 8, .topk_group = 3},
      {.method = RoutingMethod::noaux_tc, .n_experts = 256, .top_k = 8, .norm_topk_prob = true,
       .routed_scaling_factor = 2.5f, .n_group = 8, .topk_group = 4},
      {.method = RoutingMethod::noaux_tc, .n_experts = 64, .top_k = 6, .norm_topk_prob = false,
       .routed_scaling_factor = 1.0f, .n_group = 1, .topk_group = 1},
      {.method = RoutingMethod::topk_softmax, .n_experts = 32, .top_k = 4},
      {.method = RoutingMethod::softmax_topk, .n_experts = 1000, .top_k = 32},
      // Every list length with k up to 32, masked groups in short lists, padding in lists of 4, and the
      // scan (E > 256) with groups and with topk_softmax.
      {.method = RoutingMethod::softmax_topk, .n_experts = 32, .top_k = 32},
      {.method = RoutingMethod::softmax_topk, .n_experts = 40, .top_k = 32, .norm_topk_prob = true},
      {.method = RoutingMethod::group_limited_greedy, .n_experts = 8, .top_k = 2, .n_group = 4,
       .topk_group = 2},
      {.method = RoutingMethod::noaux_tc, .n_experts = 96, .top_k = 6, .norm_topk_prob = true,
       .routed_scaling_factor = 2.5f, .n_group = 6, .topk_group = 2},
      {.method = RoutingMethod::noaux_tc, .n_experts = 512, .top_k = 8, .norm_topk_prob = true,
       .routed_scaling_factor = 2.5f, .n_group = 16, .topk_group = 4},
      {.method = RoutingMethod::topk_softmax, .n_experts = 300, .top_k = 6},
  };
  // ties: logits from seven values (and no bias: noaux_tc without its correction bias), so that most
  // choices and group scores tie and the lower expert (group) must win, in the lists of every length
  // (E 8 to 256) and in the scan (E > 256).
  for (const bool ties : {false, true}) {
    for (const RouterConfig& c : configs) {
      SCOPED_TRACE(std::string(routing::routing_method_name(c.method)) + " E " + std::to_string(c.n_experts) +
                   (ties ? " (ties)" : ""));
      const int64_t T = 97, stride = c.n_experts + 3;  // a padded row stride, as the shared-gate row makes
      std::vector<float> logits = rng.normal_vector(T * stride, 3.0f);
      const std::vector<float> bias = rng.normal_vector(c.n_experts, 0.05f);
      if (ties)
        for (float& l : logits) l = std::round(std::clamp(l, -3.0f, 3.0f)) * 0.5f;
      std::vector<float> packed;
      for (int64_t t = 0; t < T; ++t)
        packed.insert(packed.end(), logits.begin() + t * stride, logits.begin() + t * stride + c.n_experts);
      std::vector<int32_t> want_ids(T * c.top_k);
      std::vector<float> want_weights(T * c.top_k);
      const bool biased = c.method == RoutingMethod::noaux_tc && !ties;
      routing::route(c, packed, biased ? std::span<const float>(bias) : std::span<const float>(), T, want_ids,
                     want_weights);

      test::Device<float> d_logits(logits), d_bias(bias), d_weights(T * c.top_k);
      test::Device<int32_t> d_ids(T * c.top_k);
      router_topk(c, d_logits.get(), stride, 1, biased ? d_bias.get() : nullptr, T, d_ids.get(), d_weights.get(),
                  nullptr);
      ASSERT_NO_FATAL_FAILURE(expect_same_routing(d_ids, d_weights, want_ids, want_weights));
    }
  }
}

// Logits in parts (RouterGemm's, one per bf16 term of the gate): router_topk selects on their sum, taken in
// order in fp32, and leaves the sums in the first part (the shared-expert gate logit past E included).
TEST(CudaRouter, TopKSumsLogitPartsInOrder) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  // 64 experts in groups (+ the shared-expert gate row); 300 (the scan), whose rows of 301 take a lane
  // through the summing loop twice.
  for (const RouterConfig& c :
       {RouterConfig{.method = RoutingMethod::noaux_tc, .n_experts = 64, .top_k = 6, .norm_topk_prob = true,
                     .routed_scaling_factor = 2.5f, .n_group = 8, .topk_group = 4},
        RouterConfig{.method = RoutingMethod::topk_softmax, .n_experts = 300, .top_k = 6}})
    for (const int parts : {2, 3}) {
      SCOPED_TRACE(std::to_string(c.n_experts) + " experts, " + std::to_string(parts) + " parts");
      const int64_t T = 45, width = c.n_experts + 1;  // + the shared-expert gate row
      // Parts of very different sizes, as the terms of a split fp32 weight are: a lost or reordered part moves
      // the sums.
      std::vector<float> logits(T * parts * width), sums(T * width);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < width; ++i) {
          float sum = 0.0f;
          for (int j = 0; j < parts; ++j) {
            const float v = static_cast<float>(rng.normal()) * std::ldexp(2.0f, -9 * j);
            logits[(t * parts + j) * width + i] = v;
            sum = j == 0 ? v : sum + v;
          }
          sums[t * width + i] = sum;
        }
      std::vector<float> packed;  // the CPU twin's input: the routed columns of the sums
      for (int64_t t = 0; t < T; ++t)
        packed.insert(packed.end(), sums.begin() + t * width, sums.begin() + t * width + c.n_experts);
      const bool biased = c.method == RoutingMethod::noaux_tc;
      const std::vector<float> bias = rng.normal_vector(c.n_experts, 0.05f);
      std::vector<int32_t> want_ids(T * c.top_k);
      std::vector<float> want_weights(T * c.top_k);
      routing::route(c, packed, biased ? std::span<const float>(bias) : std::span<const float>(), T, want_ids,
                     want_weights);

      test::Device<float> d_logits(logits), d_bias(bias), d_weights(T * c.top_k);
      test::Device<int32_t> d_ids(T * c.top_k);
      router_topk(c, d_logits.get(), parts * width, parts, biased ? d_bias.get() : nullptr, T, d_ids.get(),
                  d_weights.get(), nullptr);
      ASSERT_NO_FATAL_FAILURE(expect_same_routing(d_ids, d_weights, want_ids, want_weights));
      const auto written = d_logits.host();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < width; ++i)
          ASSERT_EQ(written[t * parts * width + i], sums[t * width + i]) << "token " << t << " column " << i;
    }
  const RouterConfig c{.method = RoutingMethod::softmax_topk, .n_experts = 64, .top_k = 6};
  const int64_t T = 45;
  // Rows that do not split into the parts are refused.
  test::Device<float> d_logits(T * 100);
  test::Device<float> d_weights(T * c.top_k);
  test::Device<int32_t> d_ids(T * c.top_k);
  EXPECT_THROW(router_topk(c, d_logits.get(), 100, 3, nullptr, T, d_ids.get(), d_weights.get(), nullptr), Error);
  EXPECT_THROW(router_topk(c, d_logits.get(), 100, 2, nullptr, T, d_ids.get(), d_weights.get(), nullptr), Error);
}

TEST(CudaRouter, FusedDecodeRouterMatchesTheCpuRouter) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  for (const RouterConfig& c : {
           RouterConfig{.method = RoutingMethod::softmax_topk, .n_experts = 128, .top_k = 8, .norm_topk_prob = true},
           RouterConfig{.method = RoutingMethod::noaux_tc, .n_experts = 256, .top_k = 8, .norm_topk_prob = true,
                        .routed_scaling_factor = 2.5f, .n_group = 8, .topk_group = 4},
           RouterConfig{.method = RoutingMethod::group_limited_greedy, .n_experts = 60, .top_k = 4, .n_group = 6,
                        .topk_group = 2}}) {
    SCOPED_TRACE(routing::routing_method_name(c.method));
    const int64_t T = 37, H = 256, rows = c.n_experts + 1;  // one extra row, as the Qwen2 shared gate adds
    const Tensor x = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
    const std::vector<float> gate = rng.normal_vector(rows * H, 0.25f), bias = rng.normal_vector(c.n_experts, 0.05f);
    std::vector<float> logits(T * c.n_experts);  // the CPU twin's input: fp64-accumulated, rounded
    for (int64_t t = 0; t < T; ++t)
      for (int e = 0; e < c.n_experts; ++e) {
        double sum = 0;
        for (int64_t h = 0; h < H; ++h)
          sum += double{::moe::bf16_to_f32(x.data_as<uint16_t>()[t * H + h])} * gate[e * H + h];
        logits[t * c.n_experts + e] = static_cast<float>(sum);
      }
    const bool biased = c.method == RoutingMethod::noaux_tc;
    std::vector<int32_t> want_ids(T * c.top_k);
    std::vector<float> want_weights(T * c.top_k);
    routing::route(c, logits, biased ? std::span<const float>(bias) : std::span<const float>(), T, want_ids,
                   want_weights);
    test::Device<uint16_t> d_x(std::vector<uint16_t>(x.data_as<uint16_t>(), x.data_as<uint16_t>() + T * H));
    test::Device<float> d_gate(gate), d_bias(bias), d_logits(T * rows), d_weights(T * c.top_k);
    test::Device<int32_t> d_ids(T * c.top_k);
    test::Device<unsigned> arrivals(std::vector<unsigned>(T, 0));
    for (int replay = 0; replay < 2; ++replay) {  // the arrival counters must be left at zero
      router_fused(c, reinterpret_cast<const bf16*>(d_x.get()), H, d_gate.get(), rows, biased ? d_bias.get() : nullptr,
                   T, d_logits.get(), arrivals.get(), d_ids.get(), d_weights.get(), nullptr);
      EXPECT_EQ(d_ids.host(), want_ids);
      const auto weights = d_weights.host();
      for (size_t i = 0; i < weights.size(); ++i) ASSERT_NEAR(weights[i], want_weights[i], 1e-5) << i;
    }
    EXPECT_EQ(arrivals.host(), std::vector<unsigned>(T, 0));
  }
}

// RouterGemm's logit parts [T, terms x rows] summed in order, as router_topk sums them: [T, rows].
std::vector<float> summed_parts(const std::vector<float>& parts, int64_t T, int64_t rows, int terms) {
  std::vector<float> logits(T * rows);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      float sum = parts[t * terms * rows + r];
      for (int j = 1; j < terms; ++j) sum += parts[(t * terms + j) * rows + r];
      logits[t * rows + r] = sum;
    }
  return logits;
}

// RouterGemm (the router past the fused kernel) against fp64 logits: with fp32 weights (three bf16 terms)
// its error is fp32 rounding; a plain bf16 copy of the same weights (what one term alone would compute)
// is far off, so the test sees a lost term. Weights that are bf16 already take one term.
TEST(CudaRouter, RouterGemmKeepsFp32Accuracy) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  // The last two shapes are the layer tests' router (64 experts, H 256), where cuBLAS picks other kernels.
  using Shape = std::tuple<int64_t, int64_t, int64_t>;  // T, H, rows
  for (const auto& [T, H, rows] : {Shape{300, 512, 129}, Shape{97, 256, 64}, Shape{700, 256, 64}}) {
    SCOPED_TRACE("T " + std::to_string(T) + ", H " + std::to_string(H) + ", rows " + std::to_string(rows));
    const Tensor x = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
    const std::vector<uint16_t> x_bits(x.data_as<uint16_t>(), x.data_as<uint16_t>() + T * H);
    std::vector<float> w = rng.normal_vector(rows * H, 0.05f);
    // The largest error relative to sum |x||w| of the logits from `gemm` against fp64 over `weights`.
    const auto worst_error = [&](const std::vector<float>& weights, const std::vector<float>& got) {
      double worst = 0;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double sum = 0, scale = 0;
          for (int64_t h = 0; h < H; ++h) {
            const double xv = ::moe::bf16_to_f32(x_bits[t * H + h]);
            sum += xv * weights[r * H + h];
            scale += std::fabs(xv * weights[r * H + h]);
          }
          worst = std::max(worst, std::fabs(got[t * rows + r] - sum) / scale);
        }
      return worst;
    };
    test::Device<uint16_t> d_x(x_bits);
    test::Device<float> d_parts(T * 3 * rows);
    const auto logits_of = [&](const RouterGemm& gemm) {
      gemm.run(reinterpret_cast<const bf16*>(d_x.get()), T, d_parts.get(), nullptr);
      return summed_parts(d_parts.host(), T, rows, gemm.terms());
    };

    const RouterGemm fp32(w.data(), rows, H);
    EXPECT_EQ(fp32.terms(), 3);
    // fp32 accumulation over H = 512 terms: ~1e-6 of sum |x||w| at worst; one bf16 term: ~1e-4.
    constexpr double kFp32Tolerance = 5e-6;
    EXPECT_LE(worst_error(w, logits_of(fp32)), kFp32Tolerance);
    std::vector<float> w_bf16(w.size());
    for (size_t i = 0; i < w.size(); ++i) w_bf16[i] = ::moe::bf16_to_f32(::moe::f32_to_bf16(w[i]));
    const RouterGemm one_term(w_bf16.data(), rows, H);
    EXPECT_EQ(one_term.terms(), 1);
    EXPECT_GE(worst_error(w, logits_of(one_term)), 4 * kFp32Tolerance) << "one bf16 term should be visibly less exact";
    EXPECT_LE(worst_error(w_bf16, logits_of(one_term)), kFp32Tolerance);
  }
}

// The layer's router past the fused kernel: RouterGemm's parts, then router_topk summing them on the device,
// with no host copy between (the sequence compute-sanitizer's initcheck flagged inside the layer test,
// 2026-11-29). The choices must be the CPU router's on the same summed logits. The parts live in the layer's
// buffer (router_logits_buffer: with a plain allocation instead, initcheck reports every read here too).
TEST(CudaRouter, RouterGemmThenTopKMatchesTheCpuRouter) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t T = 700, H = 256;
  const RouterConfig configs[] = {
      {.method = RoutingMethod::softmax_topk, .n_experts = 64, .top_k = 6, .norm_topk_prob = true},
      {.method = RoutingMethod::noaux_tc, .n_experts = 64, .top_k = 6, .norm_topk_prob = true,
       .routed_scaling_factor = 2.5f, .n_group = 8, .topk_group = 4},
  };
  for (const RouterConfig& c : configs) {
    SCOPED_TRACE(routing::routing_method_name(c.method));
    const int64_t rows = c.n_experts;
    const Tensor x = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
    const std::vector<uint16_t> x_bits(x.data_as<uint16_t>(), x.data_as<uint16_t>() + T * H);
    const std::vector<float> w = rng.normal_vector(rows * H, 0.05f);
    const std::vector<float> bias = rng.normal_vector(rows, 0.05f);
    const bool biased = c.method == RoutingMethod::noaux_tc;
    const RouterGemm gemm(w.data(), rows, H);
    test::Device<uint16_t> d_x(x_bits);
    const DeviceBuffer<float> d_parts = router_logits_buffer(T, rows, gemm);
    test::Device<float> d_bias(bias), d_weights(T * c.top_k);
    test::Device<int32_t> d_ids(T * c.top_k);
    gemm.run(reinterpret_cast<const bf16*>(d_x.get()), T, d_parts.get(), nullptr);
    router_topk(c, d_parts.get(), gemm.terms() * rows, gemm.terms(), biased ? d_bias.get() : nullptr, T,
                d_ids.get(), d_weights.get(), nullptr);
    // router_topk wrote the sums over the first part: the GEMM again for the reference's parts.
    gemm.run(reinterpret_cast<const bf16*>(d_x.get()), T, d_parts.get(), nullptr);
    std::vector<float> parts(d_parts.size());
    MOE_CUDA_CHECK(cudaMemcpy(parts.data(), d_parts.get(), parts.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const std::vector<float> logits = summed_parts(parts, T, rows, gemm.terms());
    std::vector<int32_t> want_ids(T * c.top_k);
    std::vector<float> want_weights(T * c.top_k);
    routing::route(c, logits, biased ? std::span<const float>(bias) : std::span<const float>(), T, want_ids,
                   want_weights);
    ASSERT_NO_FATAL_FAILURE(expect_same_routing(d_ids, d_weights, want_ids, want_weights));
  }
}

// With one-hot tokens every logit is one weight: the three terms must add up to it bit for bit (a lost or
// wrong term shows here, below what the tolerance above can see).
TEST(CudaRouter, RouterGemmReproducesFp32WeightsExactly) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t H = 192, rows = 72, T = H;
  const std::vector<float> w = rng.normal_vector(rows * H, 0.05f);
  std::vector<uint16_t> x(T * H, 0);
  for (int64_t t = 0; t < T; ++t) x[t * H + t] = ::moe::f32_to_bf16(1.0f);  // token t picks feature t
  test::Device<uint16_t> d_x(x);
  test::Device<float> d_parts(T * 3 * rows);
  const RouterGemm gemm(w.data(), rows, H);
  ASSERT_EQ(gemm.terms(), 3);
  gemm.run(reinterpret_cast<const bf16*>(d_x.get()), T, d_parts.get(), nullptr);
  const auto logits = summed_parts(d_parts.host(), T, rows, gemm.terms());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(logits[t * rows + r], w[r * H + t]) << "token " << t << " row " << r;
}

}  // namespace
}  // namespace moe::cuda
