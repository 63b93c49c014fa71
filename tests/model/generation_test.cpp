// The generation loop against a small deterministic CausalLM written here (a test double: its next token
// is a fixed function of the whole sequence so far, its routing a fixed function of the token). A batch of
// prompts, prefilled in chunks and decoded together, must give each sequence exactly what a one-token-at-a-
// time loop over that sequence alone gives, stop at EOS or max_new_tokens, report every routed token once,
// and count the expert load per layer.
#include "moe/model/generation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "moe/core/check.h"

namespace moe::model {
namespace {

constexpr int64_t kVocab = 11;
constexpr int32_t kEos = 9;

// The toy model's next token after `history`.
int32_t next_token(const std::vector<int32_t>& history) {
  const int64_t sum = std::accumulate(history.begin(), history.end(), int64_t{0});
  return static_cast<int32_t>((sum * 7 + static_cast<int64_t>(history.size())) % 10);
}

// Experts of `token` in MoE layer `layer` (4 experts, top-2).
std::vector<int32_t> experts_of(int32_t token, int64_t layer) {
  return {static_cast<int32_t>((token + layer) % 4), static_cast<int32_t>((token + layer + 1) % 4)};
}

class ToyCache : public KvCache {
 public:
  ToyCache(int64_t n, int64_t max_length) : tokens(n), max_length(max_length) {}
  int64_t num_sequences() const override { return static_cast<int64_t>(tokens.size()); }
  int64_t length(int64_t seq) const override { return static_cast<int64_t>(tokens.at(seq).size()); }
  std::vector<std::vector<int32_t>> tokens;
  int64_t max_length;
};

class ToyModel : public CausalLM {
 public:
  ToyModel() {
    info_.model_type = "toy";
    info_.vocab_size = kVocab;
    info_.num_layers = 4;
    info_.moe_layers = {1, 3};
    info_.num_experts = 4;
    info_.top_k = 2;
    info_.eos_token_ids = {kEos, 10};
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<KvCache> new_cache(int64_t n, int64_t max_length) const override {
    return std::make_unique<ToyCache>(n, max_length);
  }
  Tensor forward(std::span<const std::vector<int32_t>> new_tokens, KvCache& kv, bool last_only,
                 const RoutingObserver& observer) override {
    auto& cache = dynamic_cast<ToyCache&>(kv);
    EXPECT_TRUE(last_only);
    EXPECT_EQ(static_cast<int64_t>(new_tokens.size()), cache.num_sequences());
    std::vector<float> logits;
    int64_t rows = 0, batch_tokens = 0;
    for (size_t s = 0; s < new_tokens.size(); ++s) {
      if (new_tokens[s].empty()) continue;
      for (int32_t t : new_tokens[s]) {
        const int64_t pos = cache.length(s);
        cache.tokens[s].push_back(t);
        for (int64_t layer : info_.moe_layers)
          if (observer) observer({.seq = static_cast<int64_t>(s), .pos = pos, .token = t, .layer = layer,
                                  .experts = experts_of(t, layer), .weights = {0.75f, 0.25f}});
      }
      MOE_CHECK(cache.length(s) <= cache.max_length, "sequence {} outgrew the cache ({} > {})", s, cache.length(s),
                cache.max_length);
      batch_tokens += static_cast<int64_t>(new_tokens[s].size());
      // Soft logits peaked at the next token, so that sampling has a real distribution to draw from.
      const int32_t target = next_token(cache.tokens[s]);
      for (int64_t v = 0; v < kVocab; ++v) logits.push_back(v == target ? 2.0f : -0.25f * static_cast<float>(v % 3));
      ++rows;
    }
    forward_tokens.push_back(batch_tokens);
    return Tensor::from_f32({rows, kVocab}, logits);
  }

  std::vector<int64_t> forward_tokens;  // tokens in each forward, in call order

 private:
  ModelInfo info_;
};

// The continuation of one prompt, one token at a time, stopping at EOS (kept) or after max_new tokens.
std::vector<int32_t> expected_continuation(std::vector<int32_t> history, int64_t max_new) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_new) {
    out.push_back(next_token(history));
    history.push_back(out.back());
    if (out.back() == kEos) break;
  }
  return out;
}

// GenerationOptions with the fields the tests vary (assigned, not designated: GCC 12 warns about the
// std::function members a designated initialiser leaves out).
GenerationOptions options(int64_t max_new, int64_t chunk = 4096, SamplingParams sampling = {}) {
  GenerationOptions o;
  o.max_new_tokens = max_new;
  o.max_batched_tokens = chunk;
  o.sampling = sampling;
  return o;
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 2, 3, 4, 5}, {7}, {3, 3, 0, 8, 2, 6, 1, 5, 4}, {2, 2}};

TEST(Generation, BatchedAndChunkedEqualsOneSequenceAtATime) {
  for (int64_t chunk : {1, 3, 4, 17, 4096}) {
    for (int64_t max_new : {0, 1, 6, 20}) {
      SCOPED_TRACE("max_batched_tokens " + std::to_string(chunk) + ", max_new_tokens " + std::to_string(max_new));
      ToyModel model;
      std::vector<std::string> progress;
      GenerationOptions o = options(max_new, chunk);
      o.progress = [&](const std::string& line) { progress.push_back(line); };
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
      // Prefill forwards are full up to the last; then one token per running sequence per decode step.
      const int64_t prefill_forwards = (prompt_total + chunk - 1) / chunk;
      ASSERT_GE(static_cast<int64_t>(model.forward_tokens.size()), prefill_forwards);
      for (int64_t f = 0; f < prefill_forwards; ++f)
        EXPECT_EQ(model.forward_tokens[f], std::min(chunk, prompt_total - f * chunk)) << "forward " << f;
      int64_t decode_tokens = 0;
      for (size_t f = prefill_forwards; f < model.forward_tokens.size(); ++f) decode_tokens += model.forward_tokens[f];
      EXPECT_EQ(r.decode_tokens, decode_tokens);
      EXPECT_EQ(progress.size(), prompt_total > chunk ? static_cast<size_t>(prefill_forwards) : 0u);
      if (!progress.empty()) {
        EXPECT_EQ(progress.back(), fmt::format("prefill {}/{} tokens", prompt_total, prompt_total));
      }
    }
  }
}

TEST(Generation, ReportsEveryRoutedTokenOnceAndCountsTheLoad) {
  ToyModel model;
  std::map<std::tuple<int64_t, int64_t, int64_t>, int32_t> seen;  // (seq, pos, layer) -> token
  GenerationOptions o = options(7, 5);
  o.on_routing = [&](const RoutingEvent& e) {
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
  const auto message = [&](const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& options) {
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
  EXPECT_NE(message({{1}}, options(4, 0)).find("max_batched_tokens"), std::string::npos);
  EXPECT_NE(message({{1}}, options(4, 8, {.temperature = 1.0, .top_p = 2.0})).find("top_p"), std::string::npos);
}

// ModelOptions::moe_block replaces every MoE block of a real checkpoint: here with the plain reference
// MoeLayer, which must continue the fixture exactly as transformers did, each block built once per MoE layer.
TEST(Generation, MoeBlockHookReplacesEveryMoeBlock) {
  const std::filesystem::path dir = std::filesystem::path(MOE_TEST_DATA) / "models" / "deepseek_v2";
  std::ifstream in(dir / "reference.json");
  const nlohmann::json reference = nlohmann::json::parse(in);
  std::vector<int64_t> built;
  int64_t calls = 0;
  ModelOptions model_options;
  model_options.moe_block = [&](int64_t layer, const MoeConfig& config, MoeWeights weights) {
    built.push_back(layer);
    auto block = std::make_shared<MoeLayer>(config, std::move(weights), LayerOptions{.cpu_experts = CpuExperts::reference});
    return ModelOptions::MoeBlockFn([block, &calls](const Tensor& x) {
      ++calls;
      return block->forward(x);
    });
  };
  const auto model = CausalLM::load(dir, model_options);
  EXPECT_EQ(built, model->info().moe_layers);
  const nlohmann::json& c = reference.at("cases")[0];
  const std::vector<std::vector<int32_t>> prompt = {c.at("ids").get<std::vector<int32_t>>()};
  const GenerationResult r = generate(*model, prompt, options(16));
  EXPECT_EQ(r.generated[0], c.at("generated_ids").get<std::vector<int32_t>>());
  // One call per MoE layer per forward: one prefill and 15 decode steps.
  EXPECT_EQ(calls, static_cast<int64_t>(built.size()) * 16);
}

}  // namespace
}  // namespace moe::model
