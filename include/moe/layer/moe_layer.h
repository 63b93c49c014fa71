#pragma once
// One MoE block: router -> prepare -> experts -> finalize, plus shared experts.

#include <memory>

#include "moe/layer/modular.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "moe/routing/load_stats.h"

namespace moe {

enum class Backend : uint8_t { cpu };

struct LayerOptions {
  Paradigm paradigm = Paradigm::contiguous;
  double capacity_factor = 1.0;  // padded paradigm only
  OverflowPolicy overflow = OverflowPolicy::drop;
  Backend backend = Backend::cpu;
};

// Wall-clock milliseconds of each stage of one forward.
struct LayerTimings {
  double router_ms = 0, prepare_ms = 0, experts_ms = 0, finalize_ms = 0, shared_ms = 0;
  double total_ms() const { return router_ms + prepare_ms + experts_ms + finalize_ms + shared_ms; }
};

struct LayerOutput {
  Tensor hidden_states;  // [T, H] F32: routed experts' weighted sum + shared experts
  TopK topk;             // the router's choices and weights (before any capacity drop)
  routing::LoadStats stats;
  LayerTimings timings;
};

class MoeLayer {
 public:
  MoeLayer(MoeConfig config, MoeWeights weights, LayerOptions options = {});

  // x [T, H] F32, BF16 or F16. Throws moe::Error for a wrong shape or a NaN/Inf input.
  LayerOutput forward(const Tensor& x);

  const MoeConfig& config() const { return config_; }
  const LayerOptions& options() const { return options_; }

 private:
  MoeConfig config_;
  MoeWeights weights_;
  LayerOptions options_;
  std::unique_ptr<Prepare> prepare_;
  std::unique_ptr<Experts> experts_;
  std::unique_ptr<Finalize> finalize_;
};

}  // namespace moe
