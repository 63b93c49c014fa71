#pragma once
// Generation: a batch of prompts through a CausalLM. Prefill runs every prompt in batched forwards of at
// most max_batched_tokens tokens (a long prompt is split across several); then each decode step runs the
// last token of every unfinished sequence in one forward. A sequence stops at any of the model's EOS ids
// (kept in its output, as transformers does) or after max_new_tokens tokens. Along the way it counts, per
// MoE layer, how many (token, expert) pairs each expert received for prompt and for generated tokens.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "moe/model/causal_lm.h"
#include "moe/model/sampler.h"

namespace moe::model {

struct GenerationOptions {
  int64_t max_new_tokens = 32;       // >= 0; 0 runs the prefill alone
  SamplingParams sampling;           // temperature 0: greedy
  int64_t max_batched_tokens = 4096; // the most tokens in one prefill forward
  // Called for every (token, MoE layer) of the prompts and of the generated tokens that are run through
  // the model (each sequence's last token never is); may be empty.
  RoutingObserver on_routing;
  // Called after each prefill forward when the prefill takes more than one ("prefill 4096/10000 tokens");
  // may be empty.
  std::function<void(const std::string&)> progress;
};

// Expert load of one MoE layer: routed (token, expert) pairs per expert.
struct LayerLoad {
  int64_t layer = 0;                         // decoder layer index N of model.layers.N
  std::vector<int64_t> prompt_counts;        // [n_experts] from prompt tokens
  std::vector<int64_t> generated_counts;     // [n_experts] from generated tokens run through the model
  int64_t prompt_tokens = 0;                 // tokens routed in this layer
  int64_t generated_tokens = 0;
};

struct GenerationResult {
  std::vector<std::vector<int32_t>> generated;  // [sequences][new tokens], EOS included when reached
  std::vector<bool> stopped_at_eos;             // [sequences]
  int64_t prefill_tokens = 0;                   // prompt tokens run
  double prefill_seconds = 0.0;                 // wall clock of the prefill forwards and first samples
  int64_t decode_tokens = 0;                    // tokens run by decode steps (each gives one new token)
  double decode_seconds = 0.0;
  std::vector<LayerLoad> layers;                // one per MoE layer, in ModelInfo::moe_layers order

  double prefill_tokens_per_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0.0; }
  double decode_tokens_per_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0.0; }
};

// Runs `prompts` (each non-empty, ids in [0, vocab)) through `model`. Throws moe::Error for an empty
// prompt, an id outside the vocabulary, bad sampling parameters, max_new_tokens < 0 or
// max_batched_tokens < 1.
GenerationResult generate(CausalLM& model, std::span<const std::vector<int32_t>> prompts,
                          const GenerationOptions& options);

}  // namespace moe::model
