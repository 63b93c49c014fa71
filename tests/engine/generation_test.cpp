// The generation loop over an Engine on a small deterministic CausalLM (toy_model.h). A batch of prompts,
// prefilled in chunks and decoded together, must give each sequence exactly what a one-token-at-a-time
// loop over that sequence alone gives, stop at EOS or max_new_tokens, report every routed token once, and
// count the expert load per layer.
#include "moe/engine/generation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "moe/core/check.h"
#include "toy_model.h"

namespace moe::engine {
namespace {

using test::expected_continuation;
using test::experts_of;
using test::kEos;
using test::ToyModel;

// The loop's and the engine's options the tests vary (assigned, not designated: GCC 12 warns about the
// std::function members a designated initialiser leaves out).
struct Options {
  GenerationOptions generation;
  int64_t max_num_batched_tokens = 4096;
  model::RoutingObserver on_routing;
};

Options options(int64_t max_new, int64_t chunk = 4096, SamplingParams sampling = {}) {
  Options o;
  o.generation.max_new_tokens = max_new;
  o.generation.sampling = sampling;
  o.max_num_batched_tokens = chunk;
  return o;
}

// generate() on a fresh engine over `model`.
GenerationResult generate(model::CausalLM& model, std::span<const std::vector<int32_t>> prompts, const Options& o) {
  EngineOptions engine_options;
  engine_options.max_num_batched_tokens = o.max_num_batched_tokens;
  engine_options.on_routing = o.on_routing;
  Engine engine(model, engine_options);
  return engine::generate(engine, prompts, o.generation);
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 2, 3, 4, 5}, {7}, {3, 3, 0, 8, 2, 6, 1, 5, 4}, {2, 2}};

TEST(Generation, BatchedAndChunkedEqualsOneSequenceAtATime) {
  for (int64_t chunk : {1, 3, 4, 17, 4096}) {
    for (int64_t max_new : {0, 1, 6, 20}) {
      SCOPED_TRACE("max_num_batched_tokens " + std::to_string(chunk) + ", max_new_tokens " + std::to_string(max_new));
      ToyModel model;
      std::vector<std::string> progress;
      Options o = options(max_new, chunk);
      o.generation.progress = [&](const std::string& line) { progress.push_back(line); };
      const GenerationResult r = generate(model, kPrompts, o);
      ASSERT_EQ(r.generated.size(), kPrompts.size());
      int64_t prompt_total = 0;
      for (size_t s = 0; s < kPrompts.size(); ++s) {
        const auto expected = expected_continuation(kPrompts[s], max_new);
        EXPECT_EQ(r.generated[s], expected) << "sequence " << s;
        EXPECT_EQ(r.stopped_at_eos[s], !expected.empty() && expected.back() == kEos);
        prompt_total += static_cast<int64_t>(kPrompts[s].size());
      }
      EXPECT_EQ(r.prefill_tokens, prompt_total);
      // Every forward within the budget (decode tokens always run: at most one per sequence beyond it);
      // together the prompts and the decode steps' tokens.
      int64_t forward_total = 0;
      for (int64_t tokens : model.forward_tokens) {
        EXPECT_LE(tokens, std::max<int64_t>(chunk, static_cast<int64_t>(kPrompts.size())));
        forward_total += tokens;
      }
      EXPECT_EQ(forward_total, r.prefill_tokens + r.decode_tokens);
      EXPECT_EQ(progress.empty(), prompt_total <= chunk);
      if (!progress.empty()) {
        EXPECT_EQ(progress.back(), fmt::format("prefill {}/{} tokens", prompt_total, prompt_total));
      }
    }
  }
}

TEST(Generation, ReportsEveryRoutedTokenOnceAndCountsTheLoad) {
  ToyModel model;
  std::map<std::tuple<int64_t, int64_t, int64_t>, int32_t> seen;  // (seq, pos, layer) -> token
  Options o = options(7, 5);
  o.on_routing = [&](const model::RoutingEvent& e) {
    EXPECT_TRUE(seen.emplace(std::tuple(e.seq, e.pos, e.layer), e.token).second)
        << "seq " << e.seq << " pos " << e.pos << " layer " << e.layer << " twice";
  };
  const GenerationResult r = generate(model, kPrompts, o);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].layer, 1);
  EXPECT_EQ(r.layers[1].layer, 3);
  for (const LayerLoad& load : r.layers) {
    std::vector<int64_t> prompt_counts(4, 0), generated_counts(4, 0);
    int64_t prompt_tokens = 0, generated_tokens = 0;
    for (size_t s = 0; s < kPrompts.size(); ++s) {
      // Every token except the last generated one went through the model, at its position.
      std::vector<int32_t> sequence = kPrompts[s];
      sequence.insert(sequence.end(), r.generated[s].begin(), r.generated[s].end() - 1);
      for (size_t pos = 0; pos < sequence.size(); ++pos) {
        const auto it = seen.find({static_cast<int64_t>(s), static_cast<int64_t>(pos), load.layer});
        ASSERT_NE(it, seen.end()) << "seq " << s << " pos " << pos << " layer " << load.layer << " not reported";
        EXPECT_EQ(it->second, sequence[pos]);
        const bool prompt = pos < kPrompts[s].size();
        for (int32_t e : experts_of(sequence[pos], load.layer)) ++(prompt ? prompt_counts : generated_counts)[e];
        ++(prompt ? prompt_tokens : generated_tokens);
      }
    }
    EXPECT_EQ(load.prompt_counts, prompt_counts) << "layer " << load.layer;
    EXPECT_EQ(load.generated_counts, generated_counts) << "layer " << load.layer;
    EXPECT_EQ(load.prompt_tokens, prompt_tokens);
    EXPECT_EQ(load.generated_tokens, generated_tokens);
    EXPECT_EQ(load.generated_tokens, r.decode_tokens);
  }
  EXPECT_EQ(seen.size(), 2 * static_cast<size_t>(r.prefill_tokens + r.decode_tokens));
}

TEST(Generation, SamplingIsSeededPerSequence) {
  const auto run = [](std::span<const std::vector<int32_t>> prompts, uint64_t seed) {
    ToyModel model;
    return generate(model, prompts, options(12, 4096, {.temperature = 1.5, .seed = seed})).generated;
  };
  const auto a = run(kPrompts, 1);
  EXPECT_EQ(a, run(kPrompts, 1));
  EXPECT_NE(a, run(kPrompts, 2));
  // Sequence 0 draws from its own stream: alone or beside others, the same tokens (up to its own EOS).
  const auto alone = run(std::span(kPrompts).first(1), 1);
  EXPECT_EQ(alone[0], a[0]);
}

TEST(Generation, BadInputIsAnError) {
  ToyModel model;
  const auto message = [&](const std::vector<std::vector<int32_t>>& prompts, const Options& options) {
    try {
      generate(model, prompts, options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({}, options(4)).find("at least one prompt"), std::string::npos);
  EXPECT_NE(message({{1}, {}}, options(4)).find("prompt 1 has no tokens"), std::string::npos);
  EXPECT_NE(message({{1, 11}}, options(4)).find("token id 11 is outside the vocabulary [0, 11)"), std::string::npos);
  EXPECT_NE(message({{-1}}, options(4)).find("token id -1"), std::string::npos);
  EXPECT_NE(message({{1}}, options(-1)).find("max_new_tokens must be >= 0"), std::string::npos);
  EXPECT_NE(message({{1}}, options(4, 0)).find("max_num_batched_tokens"), std::string::npos);
  EXPECT_NE(message({{1}}, options(4, 8, {.temperature = 1.0, .top_p = 2.0})).find("top_p"), std::string::npos);
}

// model::ModelOptions::moe_block replaces every MoE block of a real checkpoint: here with the plain reference
// MoeLayer, which must continue the fixture exactly as transformers did, each block built once per MoE layer.
TEST(Generation, MoeBlockHookReplacesEveryMoeBlock) {
  const std::filesystem::path dir = std::filesystem::path(MOE_TEST_DATA) / "models" / "deepseek_v2";
  std::ifstream in(dir / "reference.json");
  const nlohmann::json reference = nlohmann::json::parse(in);
  std::vector<int64_t> built;
  int64_t calls = 0;
  model::ModelOptions model_options;
  model_options.moe_block = [&](int64_t layer, const MoeConfig& config, MoeWeights weights) {
    built.push_back(layer);
    auto block = std::make_shared<MoeLayer>(config, std::move(weights), LayerOptions{.cpu_experts = CpuExperts::reference});
    return model::ModelOptions::MoeBlockFn([block, &calls](const Tensor& x) {
      ++calls;
      return block->forward(x);
    });
  };
  const auto model = model::CausalLM::load(dir, model_options);
  EXPECT_EQ(built, model->info().moe_layers);
  const nlohmann::json& c = reference.at("cases")[0];
  const std::vector<std::vector<int32_t>> prompt = {c.at("ids").get<std::vector<int32_t>>()};
  const GenerationResult r = generate(*model, prompt, options(16));
  EXPECT_EQ(r.generated[0], c.at("generated_ids").get<std::vector<int32_t>>());
  // One call per MoE layer per forward: one prefill and 15 decode steps.
  EXPECT_EQ(calls, static_cast<int64_t>(built.size()) * 16);
}

}  // namespace
}  // namespace moe::engine
