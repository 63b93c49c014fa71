// The OpenAI request reader, the response shapes and the metrics text, without a socket: fields become the
// engine's request, every fault is an ApiError with the status and the field, a streamed response's chunks
// add up to the whole one, and the metrics render Prometheus histograms cumulatively.
#include "openai_request.h"

#include <gtest/gtest.h>

#include "api_error.h"
#include "metrics.h"
#include "openai_response.h"

namespace moe::server {
namespace {

RequestContext context() {
  return {.served_model_name = "m",
          .tokenizer = nullptr,
          .vocab_size = 100,
          .max_model_len = 10,
          .render_chat = {}};
}

// The status and message of parsing `body`, or 0 when it parses.
std::pair<int, std::string> fault(const std::string& body, Endpoint endpoint = Endpoint::completions) {
  try {
    parse_request(body, endpoint, context());
  } catch (const ApiError& e) {
    return {e.status, e.what()};
  }
  return {0, ""};
}

TEST(OpenaiRequest, FieldsBecomeTheEngineRequest) {
  const ApiRequest r = parse_request(
      R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 7,
          "seed": 42, "stop_token_ids": [4], "logprobs": 2, "stream": true, "stream_options": {"include_usage": true},
          "ignore_eos": true})",
      Endpoint::completions, context());
  EXPECT_EQ(r.engine.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.engine.max_new_tokens, 5);
  EXPECT_DOUBLE_EQ(r.engine.sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.engine.sampling.top_p, 0.9);
  EXPECT_EQ(r.engine.sampling.top_k, 7);
  EXPECT_EQ(r.engine.sampling.seed, 42u);
  EXPECT_EQ(r.engine.stop_token_ids, std::vector<int32_t>{4});
  EXPECT_EQ(r.engine.logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage && r.engine.ignore_eos);
  // Defaults: 16 tokens, temperature 1, no logprobs; a chat without a template is refused.
  const ApiRequest d = parse_request(R"({"prompt": [[9]]})", Endpoint::completions, context());
  EXPECT_EQ(d.engine.max_new_tokens, 16);
  EXPECT_DOUBLE_EQ(d.engine.sampling.temperature, 1.0);
  EXPECT_EQ(d.engine.logprobs, -1);
  EXPECT_EQ(fault(R"({"messages": [{"role": "user", "content": "x"}]})", Endpoint::chat_completions).first,
            400);
}

TEST(OpenaiRequest, FaultsNameTheFieldAndStatus) {
  EXPECT_EQ(fault("{").first, 400);
  EXPECT_EQ(fault(R"({"prompt": [1], "model": "other"})").first, 404);
  EXPECT_NE(fault(R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]})")
                .second.find("is 10 tokens, but the prompt has 11"),
            std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [1], "max_tokens": 10})").second.find("11 were asked for"),
            std::string::npos);
  EXPECT_NE(fault(R"({"prompt": "text"})").second.find("no tokenizer"), std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [100]})").second.find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [1], "n": 3})").second.find("'n' is not supported"), std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [1], "top_k": -2})").second.find("top_k"), std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [1], "logprobs": 21})").second.find("logprobs"), std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [1], "stream_options": {}})").second.find("needs 'stream'"),
            std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [1], "temperature": "hot"})").second.find("temperature"), std::string::npos);
  EXPECT_NE(fault(R"({"prompt": [1], "stop": "x"})").second.find("stop strings need"), std::string::npos);
  EXPECT_EQ(fault(R"({"prompt": [1], "n": 1, "echo": false})").first, 0);  // the neutral values pass
  const nlohmann::json e = error_json(404, "gone", "model");
  EXPECT_EQ(e["error"]["type"], "NotFoundError");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["code"], 404);
}

TEST(OpenaiResponse, ChunksCarryTheTextFinishAndUsage) {
  const ResponseHeader h = new_header(Endpoint::chat_completions, "m");
  EXPECT_TRUE(h.id.starts_with("chatcmpl-"));
  const nlohmann::json first = stream_chunk(h, "He", nullptr, std::nullopt, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "He");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const nlohmann::json last = stream_chunk(h, "", nullptr, engine::FinishReason::length, false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(usage_chunk(h, 3, 4)["usage"]["total_tokens"], 7);
  const nlohmann::json whole = full_response(h, "Hello", engine::FinishReason::stop, nullptr, 3, 2);
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(sse_event({{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(dump(nlohmann::json("\xff")), "\"\xEF\xBF\xBD\"");  // invalid UTF-8 replaced, not thrown
  LogprobWriter writer(Endpoint::completions, nullptr);
  const engine::TokenLogprob lp{.token = 5, .logprob = -0.5f, .top = {{5, -0.5f}, {6, -1.5f}}};
  const nlohmann::json j = writer.write(std::vector{lp, lp});
  EXPECT_EQ(j["tokens"][0], "token_id:5");
  EXPECT_EQ(j["text_offset"][1], 10);
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);
}

TEST(Metrics, HistogramsAreCumulativeAndCountersAddUp) {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.5, 0.7, 5.0}) h.observe(v);
  EXPECT_EQ(h.render("x"),
            "x_bucket{le=\"0.1\"} 1\nx_bucket{le=\"1\"} 3\nx_bucket{le=\"+Inf\"} 4\nx_sum 6.25\nx_count 4\n");
  Metrics m;
  m.count_response(200);
  m.count_response(200);
  m.count_finished(engine::FinishReason::stop, 3, 4);
  m.set_engine({.running = 1,
                .waiting = 2,
                .kv = {.block_tokens = 16, .total_blocks = 10, .free_blocks = 7},
                .preemptions = 0,
                .layers = {{.layer = 1, .prompt_counts = {3, 1}, .generated_counts = {0, 0}}}});
  const std::string text = m.render();
  for (const char* line :
       {"moe:requests_total{status=\"200\"} 2\n", "moe:request_success_total{finished_reason=\"stop\"} 1\n",
        "moe:prompt_tokens_total 3\n", "moe:generation_tokens_total 4\n", "moe:kv_cache_used_blocks 3\n",
        "moe:kv_cache_free_blocks 7\n", "moe:expert_routed_pairs_total{layer=\"1\",expert=\"0\"} 3\n",
        "moe:expert_imbalance{layer=\"1\"} 1.5\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
}

}  // namespace
}  // namespace moe::server
