#pragma once
// The OpenAI API's responses: a whole completion or chat completion, the server-sent-event chunks of a
// streamed one (the chunks' texts add up to the whole one's), usage, and logprobs in each endpoint's shape
// (completions: tokens / token_logprobs / top_logprobs / text_offset; chat: content [{token, logprob,
// bytes, top_logprobs}]).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

#include "moe/engine/request.h"
#include "moe/text/tokenizer.h"
#include "openai_request.h"

namespace moe::server {

// What every response and chunk of one request shares.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::completions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh header for a request to `endpoint` of `model`, with a random id.
ResponseHeader new_header(Endpoint endpoint, const std::string& model);

// Turns token log-probabilities into the endpoint's shape; keeps the completions' text offset across the
// chunks of one stream.
class LogprobWriter {
 public:
  // tokenizer may be null (tokens then read "token_id:N").
  LogprobWriter(Endpoint endpoint, const Tokenizer* tokenizer) : endpoint_(endpoint), tokenizer_(tokenizer) {}
  // The logprobs object for `entries` (null JSON when there are none and none were asked for).
  nlohmann::json write(std::span<const engine::TokenLogprob> entries);

 private:
  std::string token_text(int32_t id) const;
  Endpoint endpoint_;
  const Tokenizer* tokenizer_;
  int64_t text_offset_ = 0;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The whole response (stream false).
nlohmann::json full_response(const ResponseHeader& header, const std::string& text,
                             engine::FinishReason finish, const nlohmann::json& logprobs,
                             int64_t prompt_tokens, int64_t completion_tokens);

// One chunk: `text` new, finish set on the last; a chat stream's first chunk carries the role.
nlohmann::json stream_chunk(const ResponseHeader& header, const std::string& text,
                            const nlohmann::json& logprobs, std::optional<engine::FinishReason> finish,
                            bool first);

// The usage chunk (stream_options.include_usage): no choices.
nlohmann::json usage_chunk(const ResponseHeader& header, int64_t prompt_tokens, int64_t completion_tokens);

// "data: <json>\n\n", invalid UTF-8 replaced.
std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// JSON text with invalid UTF-8 replaced (never throws on bytes).
std::string dump(const nlohmann::json& j);

}  // namespace moe::server
