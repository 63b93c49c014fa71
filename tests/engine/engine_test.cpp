// The Engine's own API on the toy model (toy_model.h) and on a fixture: requests submitted and stepped to
// the end give what generate() gives, each step's outputs add up to the results, finish reasons, statistics
// readable between steps, batches bounded by max_num_seqs (routing events then still name request ids),
// and bad requests and options rejected in the library's terms.
#include "moe/engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "moe/core/check.h"
#include "moe/engine/generation.h"
#include "temp_dir.h"
#include "toy_model.h"

namespace moe::engine {
namespace {

using test::expected_continuation;
using test::kEos;
using test::ToyModel;

EngineOptions engine_options(int64_t max_num_batched_tokens, int64_t max_num_seqs = 256) {
  EngineOptions o;
  o.max_num_batched_tokens = max_num_batched_tokens;
  o.max_num_seqs = max_num_seqs;
  return o;
}

// Steps `engine` until nothing is unfinished; every output appended to its request's tokens, checked
// against the step's kind and counted into the stats the engine reports between steps.
std::map<RequestId, std::vector<int32_t>> step_to_the_end(Engine& engine) {
  std::map<RequestId, std::vector<int32_t>> tokens;
  int64_t steps = 0;
  while (engine.has_unfinished()) {
    const EngineStats before = engine.stats();
    const StepResult step = engine.step();
    EXPECT_NE(step.kind, StepResult::Kind::idle) << "an engine with unfinished requests idled";
    const EngineStats& after = engine.stats();
    EXPECT_EQ(after.prefill_tokens - before.prefill_tokens, step.prefill_tokens);
    EXPECT_EQ(after.decode_tokens - before.decode_tokens, step.tokens - step.prefill_tokens);
    EXPECT_EQ(step.kind == StepResult::Kind::prefill, step.prefill_tokens > 0);
    RequestId last = -1;
    for (const RequestOutput& out : step.outputs) {
      EXPECT_GT(out.id, last) << "outputs out of request order";
      last = out.id;
      EXPECT_LE(out.new_tokens.size(), 1u);
      tokens[out.id].insert(tokens[out.id].end(), out.new_tokens.begin(), out.new_tokens.end());
      EXPECT_EQ(engine.result(out.id).finish, out.finish);
    }
    EXPECT_LT(++steps, 1000) << "the engine does not finish";
    if (steps >= 1000) break;
  }
  EXPECT_EQ(engine.step().kind, StepResult::Kind::idle);
  return tokens;
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 2, 3, 4, 5}, {3, 3, 0, 8, 2, 6, 1, 5, 4}};

TEST(Engine, TwoRequestsSteppedToTheEndEqualGenerate) {
  for (const SamplingParams sampling : {SamplingParams{}, SamplingParams{.temperature = 1.5, .seed = 3}}) {
    SCOPED_TRACE("temperature " + std::to_string(sampling.temperature));
    ToyModel model;
    Engine engine(model, engine_options(4));
    std::vector<RequestId> ids;
    for (size_t s = 0; s < kPrompts.size(); ++s)
      ids.push_back(engine.submit({.prompt = kPrompts[s], .sampling = sampling, .max_new_tokens = 6,
                                   .sample_stream = s}));
    EXPECT_EQ(ids, (std::vector<RequestId>{0, 1}));
    EXPECT_TRUE(engine.has_unfinished());
    const auto tokens = step_to_the_end(engine);

    ToyModel other;
    Engine fresh(other, engine_options(4));
    GenerationOptions g;
    g.max_new_tokens = 6;
    g.sampling = sampling;
    const GenerationResult expected = generate(fresh, kPrompts, g);
    for (size_t s = 0; s < kPrompts.size(); ++s) {
      EXPECT_EQ(engine.result(ids[s]).generated, expected.generated[s]) << "request " << s;
      EXPECT_EQ(tokens.at(ids[s]), expected.generated[s]) << "request " << s;
      EXPECT_EQ(engine.result(ids[s]).finish == FinishReason::stop, expected.stopped_at_eos[s]);
    }
    EXPECT_EQ(model.forward_tokens, other.forward_tokens);
    const EngineStats& stats = engine.stats();
    EXPECT_EQ(stats.prefill_tokens, expected.prefill_tokens);
    EXPECT_EQ(stats.decode_tokens, expected.decode_tokens);
    ASSERT_EQ(stats.layers.size(), expected.layers.size());
    for (size_t l = 0; l < stats.layers.size(); ++l) {
      EXPECT_EQ(stats.layers[l].layer, expected.layers[l].layer);
      EXPECT_EQ(stats.layers[l].prompt_counts, expected.layers[l].prompt_counts);
      EXPECT_EQ(stats.layers[l].generated_counts, expected.layers[l].generated_counts);
      EXPECT_EQ(stats.layers[l].prompt_tokens, 14);
      EXPECT_EQ(stats.layers[l].generated_tokens, stats.decode_tokens);
    }
    EXPECT_GT(stats.prefill_seconds, 0.0);
  }
}

TEST(Engine, FinishReasons) {
  ToyModel model;
  Engine engine(model, engine_options(4096));
  // {4} continues with EOS at once; {1} with 8, 5, 1, EOS.
  const RequestId eos_first = engine.submit({.prompt = {4}, .max_new_tokens = 5});
  const RequestId capped = engine.submit({.prompt = {1}, .max_new_tokens = 2});
  const RequestId eos_later = engine.submit({.prompt = {1}, .max_new_tokens = 4});
  const RequestId prefill_only = engine.submit({.prompt = {1, 2}, .max_new_tokens = 0});
  for (RequestId id : {eos_first, capped, eos_later, prefill_only})
    EXPECT_EQ(engine.result(id).finish, FinishReason::none);

  const StepResult prefill = engine.step();
  EXPECT_EQ(prefill.kind, StepResult::Kind::prefill);
  EXPECT_EQ(prefill.tokens, 5);
  ASSERT_EQ(prefill.outputs.size(), 4u);
  EXPECT_EQ(prefill.outputs[0].new_tokens, std::vector<int32_t>{kEos});
  EXPECT_EQ(prefill.outputs[0].finish, FinishReason::stop);
  EXPECT_EQ(prefill.outputs[1].finish, FinishReason::none);
  EXPECT_TRUE(prefill.outputs[3].new_tokens.empty());
  EXPECT_EQ(prefill.outputs[3].finish, FinishReason::length);
  step_to_the_end(engine);

  EXPECT_EQ(engine.result(eos_first).generated, std::vector<int32_t>{kEos});
  EXPECT_EQ(engine.result(eos_first).finish, FinishReason::stop);
  EXPECT_EQ(engine.result(capped).generated, (std::vector<int32_t>{8, 5}));
  EXPECT_EQ(engine.result(capped).finish, FinishReason::length);
  EXPECT_EQ(engine.result(eos_later).generated, expected_continuation({1}, 4));
  EXPECT_EQ(engine.result(eos_later).finish, FinishReason::stop);
  EXPECT_TRUE(engine.result(prefill_only).generated.empty());
  EXPECT_EQ(engine.result(prefill_only).finish, FinishReason::length);
  EXPECT_STREQ(finish_reason_name(FinishReason::stop), "stop");
  EXPECT_STREQ(finish_reason_name(FinishReason::length), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::none), "none");
}

TEST(Engine, MaxNumSeqsBoundsTheBatchAndEventsNameRequestIds) {
  ToyModel model;
  EngineOptions o = engine_options(4096, 1);
  std::set<std::pair<int64_t, int64_t>> seen;  // (seq, pos) of layer 1
  o.on_routing = [&](const model::RoutingEvent& e) {
    if (e.layer == 1) {
      EXPECT_TRUE(seen.emplace(e.seq, e.pos).second);
    }
  };
  Engine engine(model, o);
  const RequestId a = engine.submit({.prompt = kPrompts[0], .max_new_tokens = 3});
  const RequestId b = engine.submit({.prompt = kPrompts[1], .max_new_tokens = 3});
  const auto tokens = step_to_the_end(engine);
  EXPECT_EQ(tokens.at(a), expected_continuation(kPrompts[0], 3));
  EXPECT_EQ(tokens.at(b), expected_continuation(kPrompts[1], 3));
  // One request at a time: its prefill, then its decode steps (the last token never runs).
  const std::vector<int64_t> forwards = {5, 1, 1, 9, 1, 1};
  EXPECT_EQ(model.forward_tokens, forwards);
  for (RequestId id : {a, b}) {
    const size_t length = kPrompts[id].size() + engine.result(id).generated.size() - 1;
    for (size_t pos = 0; pos < length; ++pos)
      EXPECT_TRUE(seen.count({id, static_cast<int64_t>(pos)})) << "request " << id << " pos " << pos;
  }
  EXPECT_EQ(seen.size(), 5u + 2u + 9u + 2u);
}

TEST(Engine, RequestsSubmittedWhileOthersRunJoinAtTheNextStep) {
  ToyModel model;
  Engine engine(model, engine_options(4096));
  EXPECT_EQ(engine.step().kind, StepResult::Kind::idle);
  const RequestId first = engine.submit({.prompt = {1}, .max_new_tokens = 3});
  EXPECT_EQ(engine.step().kind, StepResult::Kind::prefill);
  const RequestId second = engine.submit({.prompt = {7, 7}, .max_new_tokens = 3});
  // The first request's decode token and the second's prompt in one forward.
  const StepResult mixed = engine.step();
  EXPECT_EQ(mixed.kind, StepResult::Kind::prefill);
  EXPECT_EQ(mixed.tokens, 3);
  EXPECT_EQ(mixed.prefill_tokens, 2);
  ASSERT_EQ(mixed.outputs.size(), 2u);
  EXPECT_EQ(mixed.outputs[0].id, first);
  EXPECT_EQ(mixed.outputs[1].id, second);
  EXPECT_EQ(engine.num_running(), 2);
  step_to_the_end(engine);
  EXPECT_EQ(engine.result(first).generated, expected_continuation({1}, 3));
  EXPECT_EQ(engine.result(second).generated, expected_continuation({7, 7}, 3));
  // generate() after them reports its own run only.
  GenerationOptions g;
  g.max_new_tokens = 3;
  const std::vector<std::vector<int32_t>> prompts = {{1}};
  const GenerationResult r = generate(engine, prompts, g);
  EXPECT_EQ(r.generated[0], expected_continuation({1}, 3));
  EXPECT_EQ(r.prefill_tokens, 1);
  EXPECT_EQ(r.decode_tokens, 2);
  EXPECT_EQ(r.layers[0].prompt_tokens, 1);
  EXPECT_EQ(engine.stats().prefill_tokens, 4);
}

// Out of KV blocks, the newest running request is preempted and recomputed later: every request still
// gets the tokens it gets alone, and the pool is whole again at the end.
TEST(Engine, PreemptionRecomputesAndDropsNothing) {
  for (const SamplingParams sampling : {SamplingParams{}, SamplingParams{.temperature = 1.5, .seed = 5}}) {
    ToyModel model;
    EngineOptions o = engine_options(6);
    o.max_model_len = 24;
    o.kv_cache_blocks = 8;  // 32 tokens for requests of 15 to 23
    Engine engine(model, o);
    std::vector<RequestId> ids;
    // Greedy, each continues with 7s to max_new_tokens (toy_model.cpp: 7 * sum + length = 7 mod 10).
    const std::vector<std::vector<int32_t>> prompts = {{8}, {1, 1, 1, 1, 0, 0, 0, 0, 0}, {2, 3}, {4, 4, 4}};
    for (size_t s = 0; s < prompts.size(); ++s)
      ids.push_back(engine.submit({.prompt = prompts[s], .sampling = sampling, .max_new_tokens = 14,
                                   .sample_stream = s}));
    const auto tokens = step_to_the_end(engine);
    if (sampling.temperature == 0) {
      EXPECT_GT(engine.stats().preemptions, 0);  // (sampled, some stop early)
    }
    for (size_t s = 0; s < prompts.size(); ++s) {
      ToyModel alone_model;
      Engine alone(alone_model, o);
      const RequestId id = alone.submit({.prompt = prompts[s], .sampling = sampling, .max_new_tokens = 14,
                                         .sample_stream = s});
      step_to_the_end(alone);
      EXPECT_EQ(engine.result(ids[s]).generated, alone.result(id).generated) << "request " << s;
      EXPECT_EQ(tokens.at(ids[s]), alone.result(id).generated) << "request " << s;
    }
    EXPECT_EQ(engine.kv_usage().free_blocks, 8);
  }
}

TEST(Engine, CancelFreesTheRequestsBlocks) {
  ToyModel model;
  Engine engine(model, engine_options(4096, 2));
  const RequestId running = engine.submit({.prompt = {1, 2, 3, 4, 5, 6}, .max_new_tokens = 30});
  const RequestId other = engine.submit({.prompt = {2}, .max_new_tokens = 5});
  const RequestId waiting = engine.submit({.prompt = {3}, .max_new_tokens = 5});
  engine.step();
  const int64_t total = engine.kv_usage().total_blocks;
  EXPECT_EQ(engine.kv_usage().free_blocks, total - 2 - 1);  // 6 tokens in 2 blocks of 4, 1 token in 1
  engine.cancel(running);
  engine.cancel(waiting);
  EXPECT_EQ(engine.kv_usage().free_blocks, total - 1);
  EXPECT_EQ(engine.result(running).finish, FinishReason::cancelled);
  EXPECT_STREQ(finish_reason_name(FinishReason::cancelled), "abort");
  EXPECT_EQ(engine.num_waiting(), 0);
  engine.cancel(running);  // finished: nothing
  step_to_the_end(engine);
  EXPECT_EQ(engine.result(other).generated, expected_continuation({2}, 5));
  EXPECT_EQ(engine.kv_usage().free_blocks, total);
  engine.forget(running);
  EXPECT_THROW(engine.result(running), Error);
  EXPECT_THROW(engine.cancel(running), Error);
}

TEST(Engine, StopIdsMaxModelLenAndLogprobs) {
  ToyModel model;
  EngineOptions o = engine_options(4096);
  o.max_model_len = 5;
  Engine engine(model, o);
  // {1} continues with 8, 5, 1, EOS; {4, 4, 4} with 7s.
  const RequestId stopped = engine.submit({.prompt = {1}, .max_new_tokens = 5, .stop_token_ids = {5}});
  const RequestId capped = engine.submit({.prompt = {4, 4, 4}, .max_new_tokens = 10});
  const RequestId full = engine.submit({.prompt = {1, 1, 1, 1, 1}, .max_new_tokens = 10});
  const RequestId scored = engine.submit({.prompt = {1}, .max_new_tokens = 2, .logprobs = 3});
  const RequestId past_eos = engine.submit({.prompt = {1}, .max_new_tokens = 4, .ignore_eos = true});
  step_to_the_end(engine);
  EXPECT_EQ(engine.result(past_eos).generated, (std::vector<int32_t>{8, 5, 1, kEos}));
  EXPECT_EQ(engine.result(past_eos).finish, FinishReason::length);
  EXPECT_EQ(engine.result(stopped).generated, (std::vector<int32_t>{8, 5}));
  EXPECT_EQ(engine.result(stopped).finish, FinishReason::stop);
  EXPECT_EQ(engine.result(capped).generated, (std::vector<int32_t>{7, 7}));  // 3 + 2 = max_model_len
  EXPECT_EQ(engine.result(capped).finish, FinishReason::length);
  EXPECT_TRUE(engine.result(full).generated.empty());
  EXPECT_EQ(engine.result(full).finish, FinishReason::length);
  const RequestResult& r = engine.result(scored);
  ASSERT_EQ(r.logprobs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const TokenLogprob& lp = r.logprobs[i];
    EXPECT_EQ(lp.token, r.generated[i]);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first, lp.token);  // greedy: the most likely
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    EXPECT_GE(lp.top[1].second, lp.top[2].second);
    // The toy's logits: 2 at the target, -0.25 * (v % 3) elsewhere.
    double mass = 0;
    for (int v = 0; v < test::kVocab; ++v) mass += std::exp(v == lp.token ? 2.0 : -0.25 * (v % 3));
    EXPECT_NEAR(lp.logprob, 2.0 - std::log(mass), 1e-5);
  }
  EXPECT_THROW(engine.submit({.prompt = {1, 1, 1, 1, 1, 1}}), Error);               // longer than max_model_len
  EXPECT_THROW(engine.submit({.prompt = {1}, .logprobs = 21}), Error);
  EXPECT_THROW(engine.submit({.prompt = {1}, .stop = {"x"}}), Error);                // no tokenizer
  EXPECT_THROW(engine.submit({.prompt = {1}, .stop_token_ids = {11}}), Error);
  o.kv_cache_blocks = 0;
  o.max_model_len = 0;
  EXPECT_EQ(Engine(model, o).max_model_len(), 64);  // the toy's max_position_embeddings
  o.kv_cache_blocks = 15;                            // 64 tokens need 16 blocks of 4
  EXPECT_THROW(Engine(model, o), Error);
  o.kv_cache_blocks = 0;
  o.max_model_len = 65;
  EXPECT_THROW(Engine(model, o), Error);
}

// The pool's share of memory is of the model's free memory where its cache lives (the host's, or a GPU's).
TEST(Engine, TheKvPoolTakesItsFractionOfTheModelsFreeMemory) {
  ToyModel model;
  model.kv_memory = 40 * 64;  // 40 of the toy's 64-byte blocks
  EngineOptions o;
  o.max_num_seqs = 4;  // 4 x 16 blocks of 4 tokens at max_model_len 64 wanted
  o.kv_cache_memory_fraction = 0.5;
  EXPECT_EQ(Engine(model, o).kv_usage().total_blocks, 20);
  o.kv_cache_memory_fraction = 0.0;  // no cap: room for every sequence
  EXPECT_EQ(Engine(model, o).kv_usage().total_blocks, 64);
  model.kv_memory = 10 * 64;  // less than one sequence of max_model_len
  o.kv_cache_memory_fraction = 0.9;
  EXPECT_THROW(Engine(model, o), Error);
}

// A non-finite logit (a model on a GPU, whose blocks are not checked one by one) is an error, not a token.
TEST(Engine, NonFiniteLogitsAreAnError) {
  ToyModel model;
  model.nan_logits = true;
  Engine engine(model, EngineOptions{});
  engine.submit({.prompt = {1, 2}, .max_new_tokens = 2});
  EXPECT_THROW(engine.step(), Error);
}

TEST(Engine, BadRequestsAndOptionsAreErrors) {
  ToyModel model;
  Engine engine(model, engine_options(8));
  const auto message = [&](Request request) {
    try {
      engine.submit(std::move(request));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({}).find("request 0 has no prompt tokens"), std::string::npos);
  EXPECT_NE(message({.prompt = {1, 11}}).find("token id 11 is outside the vocabulary [0, 11)"), std::string::npos);
  EXPECT_NE(message({.prompt = {1}, .max_new_tokens = -1}).find("max_new_tokens must be >= 0"), std::string::npos);
  EXPECT_NE(message({.prompt = {1}, .sampling = {.temperature = 1.0, .top_k = -1}}).find("top_k"), std::string::npos);
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_THROW(engine.result(0), Error);
  EXPECT_THROW(Engine(model, engine_options(0)), Error);
  EXPECT_THROW(Engine(model, engine_options(8, 0)), Error);
  engine.submit({.prompt = {1}, .max_new_tokens = 2});
  const std::vector<std::vector<int32_t>> prompts = {{1}};
  EXPECT_THROW(generate(engine, prompts, {}), Error);  // the engine is busy
}

TEST(Engine, TokenBudgetsFollowTheStepBudget) {
  const EngineOptions o = engine_options(123);
  EXPECT_EQ(moe_workspace_tokens(o), 123);
  EXPECT_EQ(ep_exchange_tokens(o), 123);
}

// Engine::load: the model and its tokenizer from a fixture directory, continuing the fixture's prompt
// greedily as transformers did; without tokenizer.json no tokenizer.
TEST(Engine, LoadsAModelDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(MOE_TEST_DATA) / "models" / "qwen3_moe";
  std::ifstream in(dir / "reference.json");
  const nlohmann::json c = nlohmann::json::parse(in).at("cases")[0];
  EngineOptions o;
  o.model.cpu_experts = CpuExperts::reference;
  const std::unique_ptr<Engine> engine = Engine::load(dir, o);
  ASSERT_NE(engine->tokenizer(), nullptr);
  EXPECT_EQ(engine->info().model_type, "qwen3_moe");
  const auto expected = c.at("generated_ids").get<std::vector<int32_t>>();
  const RequestId id = engine->submit({.prompt = c.at("ids").get<std::vector<int32_t>>(),
                                       .max_new_tokens = static_cast<int64_t>(expected.size())});
  while (engine->has_unfinished()) engine->step();
  EXPECT_EQ(engine->result(id).generated, expected);

  moe::test::TempDir bare;
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(dir / file, bare / file);
  EXPECT_EQ(Engine::load(bare.path(), o)->tokenizer(), nullptr);
}

// On a fixture model: a greedy request gives the same tokens alone and among 32 others of different
// lengths, chunked and mixed with decode steps and preempted for KV blocks; its text pieces add up to its
// text, which ends before a stop string.
TEST(Engine, FixtureRequestAloneEqualsAmongOthers) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(MOE_TEST_DATA) / "models" / "qwen3_moe";
  EngineOptions o;
  o.model.cpu_experts = CpuExperts::reference;
  o.max_num_batched_tokens = 48;
  o.max_model_len = 128;
  const std::unique_ptr<Engine> alone = Engine::load(dir, o);
  o.kv_cache_blocks = 24;  // 384 tokens for 33 requests of up to 66
  const std::unique_ptr<Engine> crowd = Engine::load(dir, o);
  const int64_t vocab = crowd->tokenizer()->vocab_size();
  std::vector<Request> requests;
  for (int64_t r = 0; r < 33; ++r) {
    Request request{.max_new_tokens = 6 + (r * 7) % 19};
    for (int64_t i = 0; i < 3 + (r * 13) % 40; ++i)
      request.prompt.push_back(static_cast<int32_t>((r * 131 + i * 17 + 5) % vocab));
    requests.push_back(request);
  }
  std::vector<RequestId> ids;
  for (const Request& request : requests) ids.push_back(crowd->submit(request));
  std::map<RequestId, std::string> pieces;
  while (crowd->has_unfinished())
    for (const RequestOutput& out : crowd->step().outputs) pieces[out.id] += out.new_text;
  EXPECT_GT(crowd->stats().preemptions, 0);
  EXPECT_EQ(crowd->kv_usage().free_blocks, 24);
  for (size_t r = 0; r < requests.size(); ++r) {
    const RequestId id = alone->submit(requests[r]);
    while (alone->has_unfinished()) alone->step();
    EXPECT_EQ(crowd->result(ids[r]).generated, alone->result(id).generated) << "request " << r;
    EXPECT_EQ(crowd->result(ids[r]).text, alone->result(id).text) << "request " << r;
    EXPECT_EQ(pieces[ids[r]], crowd->result(ids[r]).text) << "request " << r;
  }

  // A stop string from the middle of a request's text: the text ends right before it.
  Request request = requests[5];
  request.max_new_tokens = 24;
  const RequestId plain = alone->submit(request);
  while (alone->has_unfinished()) alone->step();
  const std::string text = alone->result(plain).text;
  ASSERT_GE(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 3);
  request.stop = {stop};
  const RequestId stopped = alone->submit(request);
  std::string streamed;
  while (alone->has_unfinished())
    for (const RequestOutput& out : alone->step().outputs) streamed += out.new_text;
  EXPECT_EQ(alone->result(stopped).text, text.substr(0, text.find(stop)));
  EXPECT_EQ(alone->result(stopped).finish, FinishReason::stop);
  EXPECT_EQ(streamed, alone->result(stopped).text);
}

}  // namespace
}  // namespace moe::engine
