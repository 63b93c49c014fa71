// The CUDA router against its CPU twin (routing::route) on fresh random logits, every method.
#include <cmath>

#include "cuda_test_util.h"
#include "moe/cuda/ops.h"
#include "moe/routing/router.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

using routing::RouterConfig;
using routing::RoutingMethod;

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
  };
  for (const RouterConfig& c : configs) {
    SCOPED_TRACE(std::string(routing::routing_method_name(c.method)) + " E " + std::to_string(c.n_experts));
    const int64_t T = 97, stride = c.n_experts + 3;  // a padded row stride, as the shared-gate row makes
    std::vector<float> logits = rng.normal_vector(T * stride, 3.0f);
    const std::vector<float> bias = rng.normal_vector(c.n_experts, 0.05f);
    std::vector<float> packed;
    for (int64_t t = 0; t < T; ++t)
      packed.insert(packed.end(), logits.begin() + t * stride, logits.begin() + t * stride + c.n_experts);
    std::vector<int32_t> want_ids(T * c.top_k);
    std::vector<float> want_weights(T * c.top_k);
    const bool biased = c.method == RoutingMethod::noaux_tc;
    routing::route(c, packed, biased ? std::span<const float>(bias) : std::span<const float>(), T, want_ids,
                   want_weights);

    test::Device<float> d_logits(logits), d_bias(bias), d_weights(T * c.top_k);
    test::Device<int32_t> d_ids(T * c.top_k);
    router_topk(c, d_logits.get(), stride, biased ? d_bias.get() : nullptr, T, d_ids.get(), d_weights.get(), nullptr);
    const auto ids = d_ids.host();
    const auto weights = d_weights.host();
    EXPECT_EQ(ids, want_ids);
    for (size_t i = 0; i < weights.size(); ++i)
      ASSERT_NEAR(weights[i], want_weights[i], 1e-5 * std::max(1.0f, std::fabs(want_weights[i]))) << i;
  }
}

}  // namespace
}  // namespace moe::cuda
