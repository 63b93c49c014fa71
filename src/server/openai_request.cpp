#include "openai_request.h"

#include <fmt/core.h>

#include <random>

#include "api_error.h"
#include "moe/core/check.h"

namespace moe::server {

namespace {

// NOTE: ordered, so that the chat template's tojson prints a message's keys in the client's order.
using json = nlohmann::ordered_json;

// Fields this server does not implement: a request that sets them to anything but their neutral value is
// refused rather than answered as if they had been honoured.
struct Unsupported {
  const char* name;
  json neutral;
};
const Unsupported kUnsupported[] = {{"n", 1},
                                    {"best_of", 1},
                                    {"echo", false},
                                    {"presence_penalty", 0},
                                    {"frequency_penalty", 0},
                                    {"suffix", nullptr},
                                    {"tools", nullptr},
                                    {"response_format", nullptr}};

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw ApiError(400, message, field);
}

// The field when present and not null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number, got {}", name, v->dump()));
  return v->get<double>();
}

int64_t integer(const json& body, const char* name, int64_t fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) bad(name, fmt::format("'{}' must be an integer, got {}", name, v->dump()));
  return v->get<int64_t>();
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be true or false, got {}", name, v->dump()));
  return v->get<bool>();
}

// A list of token ids in [0, vocab).
std::vector<int32_t> token_ids(const json& list, const char* name, int64_t vocab) {
  std::vector<int32_t> ids;
  for (const json& v : list) {
    if (!v.is_number_integer())
      bad(name, fmt::format("'{}' must be a list of token ids, got {}", name, v.dump()));
    const auto id = v.get<int64_t>();
    if (id < 0 || id >= vocab)
      bad(name, fmt::format("'{}': token id {} is outside the vocabulary [0, {})", name, id, vocab));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<int32_t> encode(const RequestContext& context, const std::string& text, bool add_special_tokens,
                            const char* name) {
  if (!context.tokenizer)
    bad(name,
        fmt::format("the model has no tokenizer (tokenizer.json): give '{}' as a list of token ids", name));
  return context.tokenizer->encode(text, add_special_tokens);
}

// The completion prompt: a string, a list of token ids, or a list of one of those.
std::vector<int32_t> completion_prompt(const json& body, const RequestContext& context) {
  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required: a string or a list of token ids");
  const json* one = prompt;
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number()) {
    if (prompt->size() != 1)
      bad("prompt",
          fmt::format("'prompt' holds {} prompts; this server takes one per request", prompt->size()));
    one = &(*prompt)[0];
  }
  // NOTE: completions add the tokenizer's special tokens (a leading BOS), as vLLM and `moe generate` do.
  if (one->is_string())
    return encode(context, one->get<std::string>(), /*add_special_tokens=*/true, "prompt");
  if (one->is_array()) return token_ids(*one, "prompt", context.vocab_size);
  bad("prompt", fmt::format("'prompt' must be a string or a list of token ids, got {}", prompt->dump()));
}

std::vector<int32_t> chat_prompt(const json& body, const RequestContext& context) {
  const json* messages = field(body, "messages");
  if (!messages || !messages->is_array() || messages->empty())
    bad("messages", "'messages' is required: a non-empty list of {\"role\", \"content\"} objects");
  for (const json& m : *messages)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad("messages", fmt::format("each message needs a string 'role', got {}", m.dump()));
  if (!context.render_chat)
    bad("messages",
        "the model has no chat template (tokenizer_config.json): start the server with "
        "--chat-template FILE, or use /v1/completions");
  const json* kwargs = field(body, "chat_template_kwargs");
  if (kwargs && !kwargs->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
  std::string text;
  try {
    text = context.render_chat(*messages, kwargs ? *kwargs : json::object());
  } catch (const Error& e) {
    bad("messages", fmt::format("the chat template rejected the messages: {}", e.what()));
  }
  // NOTE: the template writes the special tokens itself (vLLM's default for chat).
  return encode(context, text, /*add_special_tokens=*/false, "messages");
}

void read_stop(const json& body, const RequestContext& context, engine::Request& request) {
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      request.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string())
          bad("stop", fmt::format("'stop' must be a string or a list of strings, got {}", stop->dump()));
        request.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or a list of strings, got {}", stop->dump()));
    }
    if (!request.stop.empty() && !context.tokenizer)
      bad("stop", "stop strings need the model's tokenizer (tokenizer.json): give 'stop_token_ids' instead");
  }
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    request.stop_token_ids = token_ids(*ids, "stop_token_ids", context.vocab_size);
  }
}

// completions: "logprobs": N (0..20); chat: "logprobs": true with "top_logprobs": N.
int read_logprobs(const json& body, Endpoint endpoint) {
  const auto check = [](int64_t n, const char* name) {
    if (n < 0 || n > engine::kMaxTopLogprobs)
      bad(name, fmt::format("'{}' must be in [0, {}], got {}", name, engine::kMaxTopLogprobs, n));
    return static_cast<int>(n);
  };
  if (endpoint == Endpoint::completions) {
    const json* v = field(body, "logprobs");
    if (!v) return -1;
    if (!v->is_number_integer())
      bad("logprobs", fmt::format("'logprobs' must be an integer, got {}", v->dump()));
    return check(v->get<int64_t>(), "logprobs");
  }
  const int64_t top = integer(body, "top_logprobs", 0);
  if (!boolean(body, "logprobs", false)) {
    if (field(body, "top_logprobs")) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return -1;
  }
  return check(top, "top_logprobs");
}

}  // namespace

ApiRequest parse_request(const std::string& body_text, Endpoint endpoint, const RequestContext& context) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::parse_error& e) {
    throw ApiError(400, fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
  if (const json* model = field(body, "model")) {
    if (!model->is_string()) bad("model", "'model' must be a string");
    if (model->get<std::string>() != context.served_model_name)
      throw ApiError(404,
                     fmt::format("The model `{}` does not exist: this server serves `{}`",
                                 model->get<std::string>(), context.served_model_name),
                     "model");
  }
  for (const Unsupported& u : kUnsupported) {
    const json* v = field(body, u.name);
    if (v && *v != u.neutral)
      bad(u.name, fmt::format("'{}' is not supported by this server (got {})", u.name, v->dump()));
  }

  ApiRequest r{.endpoint = endpoint};
  engine::Request& e = r.engine;
  e.prompt =
      endpoint == Endpoint::completions ? completion_prompt(body, context) : chat_prompt(body, context);
  if (e.prompt.empty())
    bad(endpoint == Endpoint::completions ? "prompt" : "messages", "the prompt has no tokens");
  const auto prompt_tokens = static_cast<int64_t>(e.prompt.size());
  if (prompt_tokens > context.max_model_len)
    bad(endpoint == Endpoint::completions ? "prompt" : "messages",
        fmt::format(
            "This model's maximum context length is {} tokens, but the prompt has {} tokens: shorten it",
            context.max_model_len, prompt_tokens));

  // max_tokens: completions default to 16 (OpenAI's); chat to the rest of the context (vLLM's).
  const char* max_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t room = context.max_model_len - prompt_tokens;
  const bool given = field(body, max_name) != nullptr;
  e.max_new_tokens = integer(body, max_name, endpoint == Endpoint::completions ? 16 : room);
  if (e.max_new_tokens < 0)
    bad(max_name, fmt::format("'{}' must be >= 0, got {}", max_name, e.max_new_tokens));
  if (given && e.max_new_tokens > room)
    bad(max_name,
        fmt::format("This model's maximum context length is {} tokens, but {} were asked for ({} in the "
                    "prompt, {} in the completion): lower '{}'",
                    context.max_model_len, prompt_tokens + e.max_new_tokens, prompt_tokens, e.max_new_tokens,
                    max_name));

  e.sampling.temperature = number(body, "temperature", 1.0);
  e.sampling.top_p = number(body, "top_p", 1.0);
  const int64_t top_k = integer(body, "top_k", 0);
  if (top_k < -1) bad("top_k", fmt::format("'top_k' must be -1 or 0 (all tokens) or > 0, got {}", top_k));
  e.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(std::min<int64_t>(top_k, context.vocab_size));
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer())
      bad("seed", fmt::format("'seed' must be an integer, got {}", seed->dump()));
    e.sampling.seed =
        seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    static thread_local std::random_device entropy;
    e.sampling.seed = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  }
  try {
    engine::check_sampling_params(e.sampling);
  } catch (const Error& error) {
    bad("", error.what());
  }
  read_stop(body, context, e);
  e.ignore_eos = boolean(body, "ignore_eos", false);  // vLLM's extension
  e.logprobs = read_logprobs(body, endpoint);

  r.stream = boolean(body, "stream", false);
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' needs 'stream': true");
    r.include_usage = boolean(*options, "include_usage", false);
  }
  return r;
}

}  // namespace moe::server
