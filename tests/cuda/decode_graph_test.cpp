// Decode steps replayed from their CUDA graphs (model/decode_graphs.h) against the same steps run op by op
// (ModelOptions::enforce_eager), on the transformers fixtures. Skips without a GPU.
//   - a step whose rows fill its bucket: the same kernels on the same inputs, so the same chosen ids and
//     the same routing weights, bit for bit;
//   - a step of fewer rows (3 in the bucket of 4, 5 in 8): padding rows beside it and other GEMM shapes
//     than the eager run's, so the same ids and experts, the weights within 1e-3;
//   - a new cache drops the recordings of the last (they read and write its pool) and records again.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_skip.h"
#include "cuda/device_info.h"
#include "engine/cuda_model.h"
#include "model_fixture.h"

namespace moe::test {
namespace {

using model::CausalLM;
using model::RoutingEvent;

struct Decoded {
  std::vector<std::vector<int32_t>> tokens;  // [step][sequence]
  std::vector<RoutingEvent> routing;         // of the decode steps, in report order
};

// n prompts of different lengths, then `steps` greedy decode steps of all n on a fresh cache.
Decoded decode(CausalLM& lm, int64_t n, int steps) {
  auto cache = lm.new_cache(n, 64);
  std::vector<std::vector<int32_t>> next(n);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t i = 0; i <= s % 4; ++i) next[s].push_back(static_cast<int32_t>((7 * s + 3 * i + 1) % 50));
  Decoded run;
  bool decoding = false;
  for (int step = 0; step <= steps; ++step) {
    const std::vector<int32_t> chosen =
        lm.forward_sample(next, *cache, std::vector<model::TokenChoice>(n), [&](const RoutingEvent& e) {
          if (decoding) run.routing.push_back(e);
        });
    run.tokens.push_back(chosen);
    for (int64_t s = 0; s < n; ++s) next[s] = {chosen[s]};
    decoding = true;
  }
  return run;
}

class DecodeGraphs : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeGraphs, ReplayEqualsEagerSteps) {
  MOE_SKIP_WITHOUT_GPU();
  const Fixture fixture = load_fixture(GetParam());
  const auto eager = engine::load_cuda_causal_lm(fixture.dir, {.enforce_eager = true});
  const auto graphs = engine::load_cuda_causal_lm(fixture.dir, {});
  for (const int64_t n : {1, 2, 4, 8, 3, 5}) {
    const bool full = n == 1 || n == 2 || n == 4 || n == 8;
    const Decoded want = decode(*eager, n, 5), got = decode(*graphs, n, 5);
    EXPECT_EQ(got.tokens, want.tokens) << n << " sequences";
    ASSERT_EQ(got.routing.size(), want.routing.size()) << n << " sequences";
    for (size_t i = 0; i < want.routing.size(); ++i) {
      const RoutingEvent &g = got.routing[i], &w = want.routing[i];
      ASSERT_TRUE(g.seq == w.seq && g.pos == w.pos && g.layer == w.layer && g.token == w.token) << i;
      EXPECT_EQ(g.experts, w.experts) << n << " sequences, layer " << w.layer << ", position " << w.pos;
      for (size_t j = 0; j < w.weights.size(); ++j) {
        if (full)
          EXPECT_EQ(g.weights[j], w.weights[j]) << n << " sequences, layer " << w.layer << ", position " << w.pos;
        else
          EXPECT_NEAR(g.weights[j], w.weights[j], 1e-3) << n << " sequences, layer " << w.layer;
      }
    }
    // Each n decoded on a fresh cache, which dropped the last one's recordings: one bucket now.
    EXPECT_EQ(graphs->recorded_decode_steps(), 1) << n << " sequences";
  }
  EXPECT_EQ(eager->recorded_decode_steps(), 0);
}

INSTANTIATE_TEST_SUITE_P(Families, DecodeGraphs, ::testing::ValuesIn(fixture_families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moe::test
