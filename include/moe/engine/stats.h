#pragma once
// What the Engine counts while it runs: prompt and generated tokens, their wall clock, and per MoE layer
// how many (token, expert) pairs each expert received. A step that runs prompt and decode tokens together
// splits its wall clock between prefill and decode by their token counts.

#include <cstdint>
#include <vector>

namespace moe::engine {

// Expert load of one MoE layer: routed (token, expert) pairs per expert.
struct LayerLoad {
  int64_t layer = 0;                      // decoder layer index N of model.layers.N
  std::vector<int64_t> prompt_counts;     // [n_experts] from prompt tokens
  std::vector<int64_t> generated_counts;  // [n_experts] from generated tokens run through the model
  int64_t prompt_tokens = 0;              // tokens routed in this layer
  int64_t generated_tokens = 0;
};

struct EngineStats {
  int64_t prefill_tokens = 0;    // prompt tokens run
  double prefill_seconds = 0.0;  // wall clock of the prefill steps (forwards and first samples)
  int64_t decode_tokens = 0;     // tokens run by decode steps (each gives one new token)
  double decode_seconds = 0.0;
  std::vector<LayerLoad> layers;  // one per MoE layer, in ModelInfo::moe_layers order
  int64_t preemptions = 0;        // running requests that lost their KV blocks to others (recomputed later)

  double prefill_tokens_per_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0.0; }
  double decode_tokens_per_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0.0; }
};

// The counts and times in `now` that came after `before` (an earlier copy of the same engine's stats).
EngineStats stats_since(const EngineStats& now, const EngineStats& before);

}  // namespace moe::engine
