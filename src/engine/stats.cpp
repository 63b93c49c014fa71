#include "moe/engine/stats.h"

#include "moe/core/check.h"

namespace moe::engine {

EngineStats stats_since(const EngineStats& now, const EngineStats& before) {
  MOE_CHECK(now.layers.size() == before.layers.size(), "stats of {} and {} MoE layers are not of one engine",
            now.layers.size(), before.layers.size());
  EngineStats d{.prefill_tokens = now.prefill_tokens - before.prefill_tokens,
                .prefill_seconds = now.prefill_seconds - before.prefill_seconds,
                .decode_tokens = now.decode_tokens - before.decode_tokens,
                .decode_seconds = now.decode_seconds - before.decode_seconds,
                .layers = now.layers,
                .preemptions = now.preemptions - before.preemptions};
  for (size_t l = 0; l < d.layers.size(); ++l) {
    LayerLoad& load = d.layers[l];
    const LayerLoad& old = before.layers[l];
    for (size_t e = 0; e < load.prompt_counts.size(); ++e) {
      load.prompt_counts[e] -= old.prompt_counts[e];
      load.generated_counts[e] -= old.generated_counts[e];
    }
    load.prompt_tokens -= old.prompt_tokens;
    load.generated_tokens -= old.generated_tokens;
  }
  return d;
}

}  // namespace moe::engine
