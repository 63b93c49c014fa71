#pragma once
// The local (single-rank) stages on the CPU ops, and the bundle that MoeLayer's CPU constructor runs.

#include <memory>
#include <span>

#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "moe/layer/stages.h"
#include "moe/quant/weight_format.h"

namespace moe {

// The router on the CPU: fp64-accumulated logits (vectorised where `fast` and the weight is contiguous),
// then the config's routing method. Holds the weights it reads.
std::unique_ptr<Router> make_cpu_router(const MoeConfig& config, const MoeWeights& weights, bool fast);
// `copy_rows = false` gives an index-only batch (rows [n_rows, 0]) for a FusedExperts stage.
std::unique_ptr<Prepare> make_local_contiguous_prepare(int n_experts, bool copy_rows = true);
// capacity = expert_capacity(capacity_factor, T, k, E) rows per expert, first-come in token order.
std::unique_ptr<Prepare> make_local_padded_prepare(int n_experts, double capacity_factor, OverflowPolicy overflow,
                                                   bool copy_rows = true);
// Reference experts (fp64-accumulated) for experts [expert_begin, expert_begin + weights.size()). The views
// in `weights` must outlive the stage.
std::unique_ptr<Experts> make_cpu_reference_experts(std::span<const SwigluWeights> weights, int expert_begin = 0);
std::unique_ptr<Finalize> make_local_finalize();
// Optimised CPU experts + finalize (cpu/fast_experts.h) for experts [expert_begin, expert_begin +
// weights.size()): the weights are repacked (converted to bf16, or quantised to int8) here, once; the views
// in `weights` are not used afterwards.
std::unique_ptr<FusedExperts> make_cpu_fast_experts(std::span<const SwigluWeights> weights, quant::WeightFormat format,
                                                    int expert_begin = 0);
// The config's shared experts at reference precision (null when it has none). Holds the weights it reads.
std::unique_ptr<SharedExperts> make_cpu_reference_shared(const MoeConfig& config, const MoeWeights& weights);
// The shared expert repacked for the fast kernels (null when the config has none).
std::unique_ptr<SharedExperts> make_cpu_fast_shared(const MoeConfig& config, const MoeWeights& weights,
                                                    quant::WeightFormat format);

enum class Backend : uint8_t { cpu };

// Which CPU experts run: the optimised ones (bf16 or int8 weights, fused finalize; cpu/fast_experts.h),
// or the fp64-accumulated reference ops (the oracle: exact to ~1e-6, and slow). A CPU without AVX2 runs
// the reference whatever is asked.
enum class CpuExperts : uint8_t { fast, reference };

// The options of the local CPU layer.
struct LayerOptions {
  Paradigm paradigm = Paradigm::contiguous;
  double capacity_factor = 1.0;  // padded paradigm only
  OverflowPolicy overflow = OverflowPolicy::drop;
  Backend backend = Backend::cpu;
  CpuExperts cpu_experts = CpuExperts::fast;
  quant::WeightFormat cpu_weights = quant::WeightFormat::bf16;  // fast experts only
};

// The whole local CPU bundle: router, contiguous or padded prepare, and the fast fused experts with the
// shared expert on the same kernels (the weights are repacked here and the views released), or the
// reference experts, local finalize and reference shared experts.
LayerStages make_cpu_stages(const MoeConfig& config, MoeWeights weights, const LayerOptions& options);

}  // namespace moe
