// The model runner against transformers 5.17 on every fixture family (CPU, reference experts):
//   - prefill logits of the last prompt positions: normwise relative error per row ||ours - ref||₂ / ||ref||₂
//     <= 1e-4 (the fixtures are fp32 runs of the saved weights);
//   - every MoE layer's expert choices per prompt token identical as sets (DeepSeek routers return top-k
//     unsorted), weights within 1e-4 relative;
//   - the greedy continuation (16 tokens, eos kept) identical, decoded token by token through the KV cache;
//   - the three prompts as one batch of different lengths give the same logits, routing and continuations
//     as each prompt alone;
//   - our tokenizer encodes each prompt to the fixture's ids.
#include "moe/model/causal_lm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "model_fixture.h"
#include "moe/text/tokenizer.h"

namespace moe::test {
namespace {

using model::CausalLM;
using model::RoutingEvent;

constexpr double kLogitTolerance = 1e-4;

// Returns the worst row's error.
double expect_logits_match(const Tensor& ours, int64_t first_row, const Tensor& ref, double tolerance) {
  const int64_t V = ref.size(1);
  double worst = 0;
  for (int64_t r = 0; r < ref.size(0); ++r) {
    const double err = row_rel_error(ours.data_as<float>() + (first_row + r) * V, ref.data_as<float>() + r * V, V);
    EXPECT_LE(err, tolerance) << "logits row " << r << " of the last " << ref.size(0);
    worst = std::max(worst, err);
  }
  return worst;
}

void expect_routing_match(const std::map<int64_t, std::vector<RoutingEvent>>& ours, const FixtureCase& c) {
  ASSERT_EQ(ours.size(), c.routing.size()) << "MoE layers";
  for (const auto& [layer, ref] : c.routing) {
    ASSERT_TRUE(ours.contains(layer)) << "layer " << layer;
    const auto& events = ours.at(layer);
    ASSERT_EQ(events.size(), ref.experts.size()) << "layer " << layer;
    for (size_t t = 0; t < events.size(); ++t) {
      EXPECT_EQ(events[t].pos, static_cast<int64_t>(t));
      EXPECT_EQ(events[t].token, c.ids[t]);
      std::map<int32_t, float> want, got;
      for (size_t j = 0; j < ref.experts[t].size(); ++j) want[ref.experts[t][j]] = ref.weights[t][j];
      for (size_t j = 0; j < events[t].experts.size(); ++j) got[events[t].experts[j]] = events[t].weights[j];
      ASSERT_EQ(got.size(), want.size()) << "layer " << layer << " token " << t;
      for (const auto& [expert, weight] : want) {
        ASSERT_TRUE(got.contains(expert)) << "layer " << layer << " token " << t << ": expert " << expert
                                          << " not chosen";
        EXPECT_NEAR(got[expert], weight, 1e-4 * std::max(1.0f, std::fabs(weight)))
            << "layer " << layer << " token " << t << " expert " << expert;
      }
    }
  }
}

class ModelFixture : public ::testing::TestWithParam<std::string> {
 protected:
  Fixture fixture_ = load_fixture(GetParam());
  std::unique_ptr<CausalLM> lm_ = CausalLM::load(fixture_.dir);
};

TEST_P(ModelFixture, PrefillLogitsAndRoutingMatchTransformers) {
  double worst = 0;
  for (const FixtureCase& c : fixture_.cases) {
    SCOPED_TRACE("prompt: " + c.text);
    const Prefill p = prefill(*lm_, c.ids);
    const int64_t n = static_cast<int64_t>(c.ids.size());
    ASSERT_EQ(p.logits.size(0), n);
    ASSERT_EQ(p.logits.size(1), lm_->info().vocab_size);
    worst = std::max(worst, expect_logits_match(p.logits, n - c.logits.size(0), c.logits, kLogitTolerance));
    expect_routing_match(p.routing, c);
  }
  std::printf("[ %s ] worst normwise logits error %.2e (tolerance %.0e)\n", GetParam().c_str(), worst, kLogitTolerance);
}

TEST_P(ModelFixture, GreedyContinuationMatchesTransformers) {
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (const FixtureCase& c : fixture_.cases) {
    const std::vector<int32_t> generated = greedy(*lm_, c.ids, fixture_.max_new_tokens, fixture_.eos);
    EXPECT_EQ(generated, c.generated) << c.text;
    tokens += static_cast<int64_t>(generated.size());
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ %s ] %lld greedy tokens (with 3 prefills) in %.1f ms\n", GetParam().c_str(),
              static_cast<long long>(tokens), ms);
}

// A long sequence (past several doublings of the cache) fed token by token gives the logits of one prefill.
TEST_P(ModelFixture, DecodingTokenByTokenEqualsOnePrefill) {
  std::vector<int32_t> tokens;
  while (tokens.size() < 100)
    for (const FixtureCase& c : fixture_.cases) tokens.insert(tokens.end(), c.ids.begin(), c.ids.end());
  tokens.resize(100);
  const int64_t n = static_cast<int64_t>(tokens.size()), V = lm_->info().vocab_size;
  const Prefill all = prefill(*lm_, tokens);
  auto cache = lm_->new_cache(1, n);
  const std::vector<std::vector<int32_t>> first = {{tokens.begin(), tokens.begin() + 5}};
  lm_->forward(first, *cache, true);
  for (int64_t i = 5; i < n; ++i) {
    const std::vector<std::vector<int32_t>> step = {{tokens[i]}};
    const Tensor logits = lm_->forward(step, *cache, true);  // [1, V]
    ASSERT_LE(row_rel_error(logits.data_as<float>(), all.logits.data_as<float>() + i * V, V), 1e-5) << "position " << i;
  }
  EXPECT_EQ(cache->length(0), n);
}

TEST_P(ModelFixture, OneBatchOfAllPromptsMatchesEachAlone) {
  const int64_t S = static_cast<int64_t>(fixture_.cases.size()), V = lm_->info().vocab_size;
  std::vector<std::vector<int32_t>> batch;
  int64_t longest = 0;
  for (const FixtureCase& c : fixture_.cases) {
    batch.push_back(c.ids);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(c.ids.size()));
  }
  ASSERT_TRUE(std::any_of(batch.begin(), batch.end(), [&](const auto& ids) { return ids.size() != batch[0].size(); }))
      << "the fixture prompts should differ in length";
  auto cache = lm_->new_cache(S, longest + fixture_.max_new_tokens);
  std::map<int64_t, std::map<int64_t, std::vector<RoutingEvent>>> routing;  // seq -> layer -> events
  const Tensor logits = lm_->forward(batch, *cache, /*last_only=*/false,
                                     [&](const RoutingEvent& e) { routing[e.seq][e.layer].push_back(e); });
  int64_t row = 0;
  std::vector<int64_t> last_rows;
  for (int64_t s = 0; s < S; ++s) {
    const FixtureCase& c = fixture_.cases[s];
    SCOPED_TRACE("sequence " + std::to_string(s));
    const int64_t n = static_cast<int64_t>(c.ids.size());
    EXPECT_EQ(cache->length(s), n);
    expect_logits_match(logits, row + n - c.logits.size(0), c.logits, kLogitTolerance);
    const Prefill alone = prefill(*lm_, c.ids);
    for (int64_t r = 0; r < n; ++r)
      EXPECT_LE(row_rel_error(logits.data_as<float>() + (row + r) * V, alone.logits.data_as<float>() + r * V, V), 1e-6)
          << "batched row " << r << " differs from the prompt alone";
    expect_routing_match(routing[s], c);
    row += n;
    last_rows.push_back(row - 1);
  }

  // Greedy decoding of all sequences together; a finished sequence gets no tokens (an empty list).
  std::vector<std::vector<int32_t>> generated(S);
  std::vector<bool> done(S, false);
  std::vector<std::vector<int32_t>> step(S);
  for (int64_t s = 0; s < S; ++s) generated[s].push_back(argmax(logits.data_as<float>() + last_rows[s] * V, V));
  auto finished = [&](int64_t s) {
    const int32_t last = generated[s].back();
    return static_cast<int64_t>(generated[s].size()) >= fixture_.max_new_tokens ||
           std::find(fixture_.eos.begin(), fixture_.eos.end(), last) != fixture_.eos.end();
  };
  while (true) {
    bool any = false;
    for (int64_t s = 0; s < S; ++s) {
      done[s] = finished(s);
      step[s] = done[s] ? std::vector<int32_t>{} : std::vector<int32_t>{generated[s].back()};
      any |= !done[s];
    }
    if (!any) break;
    const Tensor next = lm_->forward(step, *cache, /*last_only=*/true);  // one row per active sequence
    int64_t r = 0;
    for (int64_t s = 0; s < S; ++s)
      if (!done[s]) generated[s].push_back(argmax(next.data_as<float>() + (r++) * V, V));
  }
  for (int64_t s = 0; s < S; ++s) EXPECT_EQ(generated[s], fixture_.cases[s].generated) << "sequence " << s;
}

TEST_P(ModelFixture, TokenizerEncodesThePrompts) {
  const Tokenizer tokenizer = Tokenizer::load(fixture_.dir / "tokenizer.json");
  for (const FixtureCase& c : fixture_.cases)
    EXPECT_EQ(tokenizer.encode(c.text, /*add_special_tokens=*/true), c.ids) << c.text;
}

TEST_P(ModelFixture, InfoDescribesTheModel) {
  const model::ModelInfo& info = lm_->info();
  EXPECT_EQ(info.model_type, GetParam());
  std::vector<int64_t> moe_layers;
  for (const auto& [layer, r] : fixture_.cases[0].routing) moe_layers.push_back(layer);
  EXPECT_EQ(info.moe_layers, moe_layers);
  EXPECT_EQ(info.eos_token_ids, fixture_.eos);
  EXPECT_EQ(info.top_k, static_cast<int>(fixture_.cases[0].routing.begin()->second.experts[0].size()));
}

// The optimised CPU experts (bf16 weights) through ModelOptions: close to transformers, not exact. Rows
// of tokens whose routing differs from transformers' somewhere (a near tie under bf16) are not compared.
TEST_P(ModelFixture, FastCpuExpertsStayClose) {
  model::ModelOptions options;
  options.cpu_experts = CpuExperts::fast;
  const auto fast = CausalLM::load(fixture_.dir, options);
  const int64_t V = fast->info().vocab_size;
  double worst = 0;
  int64_t skipped = 0;
  for (const FixtureCase& c : fixture_.cases) {
    const Prefill p = prefill(*fast, c.ids);
    const int64_t n = static_cast<int64_t>(c.ids.size());
    for (int64_t r = 0; r < c.logits.size(0); ++r) {
      const int64_t pos = n - c.logits.size(0) + r;
      bool same_routing = true;
      for (const auto& [layer, ref] : c.routing) {
        const auto& e = p.routing.at(layer)[pos];
        same_routing &= std::set<int32_t>(e.experts.begin(), e.experts.end()) ==
                        std::set<int32_t>(ref.experts[pos].begin(), ref.experts[pos].end());
      }
      if (!same_routing) {
        ++skipped;
        continue;
      }
      const double err = row_rel_error(p.logits.data_as<float>() + pos * V, c.logits.data_as<float>() + r * V, V);
      EXPECT_LE(err, 3e-2) << c.text << " row " << r;
      worst = std::max(worst, err);
    }
  }
  std::printf("[ %s ] fast CPU experts: worst normwise logits error %.2e (%lld rerouted rows skipped)\n",
              GetParam().c_str(), worst, static_cast<long long>(skipped));
}

TEST_P(ModelFixture, LoadingReportsProgressPerLayer) {
  model::ModelOptions options;
  std::vector<std::pair<int64_t, int64_t>> calls;  // (loaded, layers)
  options.progress = [&](int64_t loaded, int64_t layers) { calls.emplace_back(loaded, layers); };
  const auto lm = CausalLM::load(fixture_.dir, options);
  const int64_t n = lm->info().num_layers;
  ASSERT_EQ(static_cast<int64_t>(calls.size()), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(calls[i], std::make_pair(i + 1, n));
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFixture, ::testing::ValuesIn(fixture_families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moe::test
