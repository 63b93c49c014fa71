#pragma once
// What a caller hands the Engine (a Request) and what it gets back: the tokens (and text) each step gave a
// request, and the request's whole result once it is finished.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "moe/engine/sampler.h"

namespace moe::engine {

// Engine::submit's handle for a request: 0, 1, 2, ... in submission order.
using RequestId = int64_t;

// The most top_logprobs a request may ask for (the OpenAI API's limit).
inline constexpr int kMaxTopLogprobs = 20;

struct Request {
  std::vector<int32_t> prompt{};  // token ids in [0, vocab), at least one
  SamplingParams sampling{};    // temperature 0: greedy; sampling.seed seeds the request's generator
  // >= 0; 0 runs the prefill alone. A request also stops when prompt and generated tokens reach the
  // engine's max_model_len (finish reason length).
  int64_t max_new_tokens = 32;
  // Which of the seed's random streams the request draws from: two requests with the same seed and stream
  // draw the same numbers (generate() gives prompt s stream s, so that a batch's sequences differ).
  uint64_t sample_stream = 0;
  // Token ids that stop the request when sampled, as the model's EOS ids do (kept in the tokens, left out of
  // the text).
  std::vector<int32_t> stop_token_ids{};
  // Strings that stop the request when its text comes to hold one; the text ends before it. Needs the
  // engine's tokenizer.
  std::vector<std::string> stop{};
  // -1: no log-probabilities; n in [0, kMaxTopLogprobs]: each new token's log-probability under the
  // model's distribution (the logits before temperature, top-k and top-p) and the n most likely tokens'.
  int logprobs = -1;
  // Keep generating past the model's EOS ids (to max_new_tokens; stop_token_ids still stop): what a
  // benchmark of fixed output lengths asks for.
  bool ignore_eos = false;
};

enum class FinishReason : uint8_t {
  none,       // still running (or waiting)
  stop,       // sampled an EOS or stop id (kept in the output, as transformers does), or a stop string
  length,     // reached max_new_tokens or max_model_len
  cancelled,  // Engine::cancel
};

// "none", "stop", "length" (the OpenAI API's finish_reason values) or "abort" (vLLM's for a cancel).
const char* finish_reason_name(FinishReason reason);

// A generated token's log-probability and the most likely tokens' (most likely first; ties: lower id).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top{};  // [n] (id, log-probability)
};

// What one Engine::step gave one request.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_tokens{};        // the tokens sampled in this step (at most one today)
  FinishReason finish = FinishReason::none;  // set in the step that finished the request
  // Text that became final in this step (the text so far minus a tail that may still turn into a stop
  // string or a whole character); the outputs' texts add up to the result's text. Empty without a tokenizer.
  std::string new_text{};
  std::vector<TokenLogprob> logprobs{};  // one per new token when the request asked for them
};

// A request's output so far: readable at any time, final once `finish` is set.
struct RequestResult {
  std::vector<int32_t> generated{};         // [new tokens], EOS included when reached
  FinishReason finish = FinishReason::none;
  std::string text{};                       // the generated text (special tokens skipped), ended before a stop string
  std::vector<TokenLogprob> logprobs{};     // [new tokens] when the request asked for them
  int64_t preemptions = 0;                  // times the request lost its KV blocks and was recomputed
};

}  // namespace moe::engine
