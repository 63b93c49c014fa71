#pragma once
// The Engine's expert load counts: every routing event of a batch's forwards, counted into its MoE layer's
// prompt or generated counts (EngineStats::layers).

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "moe/engine/stats.h"
#include "moe/model/causal_lm.h"

namespace moe::engine {

class LoadCounter {
 public:
  // Appends one LayerLoad per MoE layer of `info` to `layers`, which must outlive the counter.
  LoadCounter(const model::ModelInfo& info, std::vector<LayerLoad>& layers);

  // The forward whose events follow: the prompt length of the request in each KV cache sequence (an
  // event's position below it is a prompt token).
  void start_batch(std::vector<int64_t> prompt_lengths);

  // Counts one event. Thread-safe. Throws moe::Error for a layer, sequence or expert the model does not have.
  void count(const model::RoutingEvent& event);

 private:
  std::vector<LayerLoad>& layers_;
  int64_t num_experts_;
  std::vector<int64_t> prompt_lengths_;        // [batch sequences]
  std::unordered_map<int64_t, size_t> slots_;  // decoder layer index -> index in layers_
  std::mutex mutex_;
};

}  // namespace moe::engine
