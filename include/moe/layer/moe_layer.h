#pragma once
// One MoE block: router -> prepare -> experts -> finalize, plus shared experts.

#include <memory>

#include "moe/layer/modular.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "moe/routing/load_stats.h"

namespace moe {

enum class Backend : uint8_t { cpu };

// Which CPU experts run: the optimised ones (bf16 or int8 weights, fused finalize; moe/cpu/fast_experts.h),
// or the fp64-accumulated reference ops (the oracle: exact to ~1e-6, and slow). A CPU without AVX2 runs
// the reference whatever is asked.
enum class CpuExperts : uint8_t { fast, reference };

struct LayerOptions {
  Paradigm paradigm = Paradigm::contiguous;
  double capacity_factor = 1.0;  // padded paradigm only
  OverflowPolicy overflow = OverflowPolicy::drop;
  Backend backend = Backend::cpu;
  CpuExperts cpu_experts = CpuExperts::fast;
  quant::WeightFormat cpu_weights = quant::WeightFormat::bf16;  // fast experts only
};

// Wall-clock milliseconds of each stage of one forward. With the fast CPU experts, experts_ms covers the
// experts and the fused finalize (finalize_ms is 0), and shared_ms the shared expert on the same kernels.
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

// x [T, H] (F32, BF16 or F16) as F32, checked for its shape and for NaN/Inf (moe::Error naming the token).
Tensor layer_input_f32(const Tensor& x, int64_t hidden);

class MoeLayer {
 public:
  MoeLayer(MoeConfig config, MoeWeights weights, LayerOptions options = {});

  // The expert weights are repacked here when options.cpu_experts is fast (the checkpoint views are then
  // released). x [T, H] F32, BF16 or F16. Throws moe::Error for a wrong shape or a NaN/Inf input.
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
  // The fast path: fused experts + finalize, the shared expert repacked, the router weight as F32.
  std::unique_ptr<FusedExperts> fused_;
  cpu::PackedExpertPtr shared_packed_;
  Tensor router_f32_;
  cpu::Isa isa_ = cpu::Isa::avx2;
  cpu::StreamPrefetch prefetch_ = cpu::StreamPrefetch::software;
};

}  // namespace moe
