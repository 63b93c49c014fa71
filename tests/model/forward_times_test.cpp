// ModelOptions::times (what `moe bench --model` reports): every part a forward runs gets time, the parts
// add up to no more than the total, the sums grow over forwards, and timing leaves the logits unchanged.
#include <gtest/gtest.h>

#include <cstring>

#include "model_fixture.h"
#include "moe/model/causal_lm.h"

namespace moe::test {
namespace {

using model::ForwardTimes;

Tensor prefill(model::CausalLM& lm, const std::vector<int32_t>& ids) {
  auto cache = lm.new_cache(1, static_cast<int64_t>(ids.size()));
  const std::vector<std::vector<int32_t>> batch = {ids};
  return lm.forward(batch, *cache, false);
}

double parts(const ForwardTimes& t) {
  return t.embedding + t.norms + t.attention_projections + t.attention_core + t.attention_other + t.moe +
         t.dense_mlp + t.lm_head;
}

// deepseek_v3: MLA and a dense first layer (first_k_dense_replace 1); qwen3_moe: GQA with q/k norms.
TEST(ForwardTimes, EveryPartIsTimedAndTheSumsGrow) {
  for (const std::string family : {"qwen3_moe", "deepseek_v3"}) {
    SCOPED_TRACE(family);
    const Fixture fixture = load_fixture(family);
    ForwardTimes times;
    model::ModelOptions options;
    options.times = &times;
    auto timed = model::CausalLM::load(fixture.dir, options);
    auto plain = model::CausalLM::load(fixture.dir);
    const std::vector<int32_t>& ids = fixture.cases.at(0).ids;
    const Tensor logits = prefill(*timed, ids);
    const Tensor expected = prefill(*plain, ids);
    ASSERT_EQ(logits.nbytes(), expected.nbytes());
    EXPECT_EQ(std::memcmp(logits.data(), expected.data(), logits.nbytes()), 0);
    for (double ForwardTimes::*part :
         {&ForwardTimes::embedding, &ForwardTimes::norms, &ForwardTimes::attention_projections,
          &ForwardTimes::attention_core, &ForwardTimes::attention_other, &ForwardTimes::moe, &ForwardTimes::lm_head,
          &ForwardTimes::total})
      EXPECT_GT(times.*part, 0.0);
    if (family == "deepseek_v3") EXPECT_GT(times.dense_mlp, 0.0);
    else EXPECT_EQ(times.dense_mlp, 0.0);
    EXPECT_LE(parts(times), times.total);
    const ForwardTimes first = times;
    prefill(*timed, ids);
    EXPECT_GT(times.total, first.total);
    EXPECT_GT(times.attention_projections, first.attention_projections);
  }
}

}  // namespace
}  // namespace moe::test
