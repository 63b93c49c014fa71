#pragma once
// The OpenAI API's request bodies, read and checked: POST /v1/completions (the prompt as a string or a list
// of token ids) and POST /v1/chat/completions (messages rendered with the chat template), their sampling
// fields, stop, stream (+ stream_options.include_usage) and logprobs, turned into an engine::Request.
// Every fault is an ApiError naming the field (400), or the model (404).

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "moe/engine/request.h"
#include "moe/text/tokenizer.h"

namespace moe::server {

enum class Endpoint : uint8_t { completions, chat_completions };

// What a request is checked against.
struct RequestContext {
  std::string served_model_name{};
  const Tokenizer* tokenizer = nullptr;  // null: prompts must be token ids, no stop strings, no chat
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  // Renders chat messages (a JSON array, the request's key order kept) with the request's
  // chat_template_kwargs (an object) to the prompt text, the generation prompt added; empty when the model
  // has no chat template. Throws moe::Error for messages the template rejects.
  std::function<std::string(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& kwargs)>
      render_chat{};
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  engine::Request engine{};  // prompt, sampling, max_new_tokens, stop, logprobs
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Reads `body` (JSON) for `endpoint`. Throws ApiError.
ApiRequest parse_request(const std::string& body, Endpoint endpoint, const RequestContext& context);

}  // namespace moe::server
