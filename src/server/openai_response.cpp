#include "openai_response.h"

#include <fmt/core.h>

#include <chrono>
#include <random>

namespace moe::server {

using nlohmann::json;

ResponseHeader new_header(Endpoint endpoint, const std::string& model) {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {
      .endpoint = endpoint,
      .id = fmt::format("{}-{:016x}", endpoint == Endpoint::completions ? "cmpl" : "chatcmpl", generator()),
      .created = std::chrono::duration_cast<std::chrono::seconds>(now).count(),
      .model = model};
}

std::string LogprobWriter::token_text(int32_t id) const {
  if (!tokenizer_ || id >= tokenizer_->vocab_size()) return fmt::format("token_id:{}", id);
  const int32_t one[] = {id};
  return tokenizer_->decode(one);
}

json LogprobWriter::write(std::span<const engine::TokenLogprob> entries) {
  const auto bytes = [](const std::string& s) {
    json out = json::array();
    for (unsigned char c : s) out.push_back(static_cast<int>(c));
    return out;
  };
  if (endpoint_ == Endpoint::chat_completions) {
    json content = json::array();
    for (const engine::TokenLogprob& e : entries) {
      const std::string token = token_text(e.token);
      json top = json::array();
      for (const auto& [id, logprob] : e.top) {
        const std::string t = token_text(id);
        top.push_back({{"token", t}, {"logprob", logprob}, {"bytes", bytes(t)}});
      }
      content.push_back(
          {{"token", token}, {"logprob", e.logprob}, {"bytes", bytes(token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const engine::TokenLogprob& e : entries) {
    const std::string token = token_text(e.token);
    tokens.push_back(token);
    token_logprobs.push_back(e.logprob);
    // NOTE: as vLLM does, the sampled token is among its top_logprobs even when it is not among the n most
    // likely.
    json top = json::object();
    for (const auto& [id, logprob] : e.top) top[token_text(id)] = logprob;
    top[token] = e.logprob;
    top_logprobs.push_back(top);
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(token.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json full_response(const ResponseHeader& header, const std::string& text, engine::FinishReason finish,
                   const json& logprobs, int64_t prompt_tokens, int64_t completion_tokens) {
  const bool chat = header.endpoint == Endpoint::chat_completions;
  json choice = {{"index", 0}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = engine::finish_reason_name(finish);
  return {{"id", header.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", header.created},
          {"model", header.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

json stream_chunk(const ResponseHeader& header, const std::string& text, const json& logprobs,
                  std::optional<engine::FinishReason> finish, bool first) {
  const bool chat = header.endpoint == Endpoint::chat_completions;
  json choice = {{"index", 0}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty() || !finish) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish ? json(engine::finish_reason_name(*finish)) : json(nullptr);
  return {{"id", header.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", header.created},
          {"model", header.model},
          {"choices", json::array({choice})}};
}

json usage_chunk(const ResponseHeader& header, int64_t prompt_tokens, int64_t completion_tokens) {
  const bool chat = header.endpoint == Endpoint::chat_completions;
  return {{"id", header.id},           {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", header.created}, {"model", header.model},
          {"choices", json::array()},  {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

}  // namespace moe::server
