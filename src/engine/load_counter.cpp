#include "load_counter.h"

#include "moe/core/check.h"

namespace moe::engine {

LoadCounter::LoadCounter(const model::ModelInfo& info, std::vector<LayerLoad>& layers)
    : layers_(layers), num_experts_(info.num_experts) {
  for (int64_t layer : info.moe_layers) {
    slots_[layer] = layers_.size();
    layers_.push_back({.layer = layer,
                       .prompt_counts = std::vector<int64_t>(num_experts_, 0),
                       .generated_counts = std::vector<int64_t>(num_experts_, 0)});
  }
}

void LoadCounter::start_batch(std::vector<int64_t> prompt_lengths) {
  std::lock_guard lock(mutex_);
  prompt_lengths_ = std::move(prompt_lengths);
}

void LoadCounter::count(const model::RoutingEvent& event) {
  // NOTE: the model may report from several threads; the counts are the only shared state here.
  std::lock_guard lock(mutex_);
  const auto slot = slots_.find(event.layer);
  MOE_CHECK(slot != slots_.end(), "routing event for layer {}, which ModelInfo does not list as a MoE layer",
            event.layer);
  MOE_CHECK(event.seq >= 0 && event.seq < static_cast<int64_t>(prompt_lengths_.size()),
            "routing event for sequence {} of {}", event.seq, prompt_lengths_.size());
  LayerLoad& load = layers_[slot->second];
  const bool prompt = event.pos < prompt_lengths_[event.seq];
  auto& counts = prompt ? load.prompt_counts : load.generated_counts;
  ++(prompt ? load.prompt_tokens : load.generated_tokens);
  for (int32_t e : event.experts) {
    MOE_CHECK(e >= 0 && e < num_experts_, "routing event names expert {} of {}", e, num_experts_);
    ++counts[e];
  }
}

}  // namespace moe::engine
