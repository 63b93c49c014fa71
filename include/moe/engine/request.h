#pragma once
// What a caller hands the Engine (a Request) and what it gets back: the tokens each step gave a request,
// and the request's whole result once it is finished.

#include <cstdint>
#include <vector>

#include "moe/engine/sampler.h"

namespace moe::engine {

// Engine::submit's handle for a request: 0, 1, 2, ... in submission order.
using RequestId = int64_t;

struct Request {
  std::vector<int32_t> prompt{};  // token ids in [0, vocab), at least one
  SamplingParams sampling{};    // temperature 0: greedy; sampling.seed seeds the request's generator
  int64_t max_new_tokens = 32;  // >= 0; 0 runs the prefill alone
  // Which of the seed's random streams the request draws from: two requests with the same seed and stream
  // draw the same numbers (generate() gives prompt s stream s, so that a batch's sequences differ).
  uint64_t sample_stream = 0;
};

enum class FinishReason : uint8_t {
  none,    // still running (or waiting)
  stop,    // sampled one of the model's EOS ids (kept in the output, as transformers does)
  length,  // reached max_new_tokens
};

// "none", "stop" or "length" (the OpenAI API's finish_reason values).
const char* finish_reason_name(FinishReason reason);

// What one Engine::step gave one request.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_tokens{};        // the tokens sampled in this step (at most one today)
  FinishReason finish = FinishReason::none;  // set in the step that finished the request
};

// A request's output so far: readable at any time, final once `finish` is set.
struct RequestResult {
  std::vector<int32_t> generated{};         // [new tokens], EOS included when reached
  FinishReason finish = FinishReason::none;
};

}  // namespace moe::engine
