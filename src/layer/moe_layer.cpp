#include "moe/layer/moe_layer.h"

#include <chrono>
#include <cmath>

#include <numeric>

#include "moe/cpu/fast_experts.h"
#include "moe/cpu/ops.h"
#include "moe/layer/shared_experts.h"

namespace moe {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

Tensor layer_input_f32(const Tensor& x, int64_t hidden) {
  MOE_CHECK(x.dim() == 2 && x.size(1) == hidden, "hidden_states has shape {}, expected [T, {}] (hidden_size)",
            x.shape_string(), hidden);
  MOE_CHECK(dtype_is_float(x.dtype()) && x.dtype() != DType::F8_E4M3,
            "hidden_states is {}: it must be F32, BF16 or F16", dtype_name(x.dtype()));
  Tensor f = x.to_f32();
  const float* p = f.data_as<float>();
  for (int64_t i = 0; i < f.numel(); ++i)
    MOE_CHECK(std::isfinite(p[i]), "hidden_states contains NaN/Inf ({}) at token {}, column {}", p[i], i / hidden,
              i % hidden);
  return f;
}

MoeLayer::MoeLayer(MoeConfig config, MoeWeights weights, LayerOptions options)
    : config_(std::move(config)), weights_(std::move(weights)), options_(options) {
  routing::validate(config_.router);
  MOE_CHECK(static_cast<int>(weights_.experts.size()) == config_.router.n_experts, "{} expert weights for {} experts",
            weights_.experts.size(), config_.router.n_experts);
  const int E = config_.router.n_experts;
  // NOTE: a CPU without AVX2 runs the reference experts whatever was asked (the fast kernels need it).
  const bool fast = options_.cpu_experts == CpuExperts::fast && cpu::fast_experts_available();
  prepare_ = options_.paradigm == Paradigm::contiguous
                 ? make_local_contiguous_prepare(E, /*copy_rows=*/!fast)
                 : make_local_padded_prepare(E, options_.capacity_factor, options_.overflow, /*copy_rows=*/!fast);
  if (options_.paradigm == Paradigm::padded) expert_capacity(options_.capacity_factor, 1, 1, E);  // validates
  if (!fast) {
    experts_ = make_cpu_reference_experts(weights_.experts);
    finalize_ = make_local_finalize();
    return;
  }
  isa_ = cpu::detect_isa();
  prefetch_ = cpu::detect_stream_prefetch();
  fused_ = make_cpu_fast_experts(weights_.experts, options_.cpu_weights);
  if (config_.shared != SharedExpertKind::none) shared_packed_ = cpu::pack_expert(weights_.shared, options_.cpu_weights);
  // NOTE: the packed copies are all the fast path reads; dropping the views frees converted or random weights.
  for (SwigluWeights& w : weights_.experts) w = {};
  weights_.shared.gate = weights_.shared.up = weights_.shared.down = Tensor();
  router_f32_ = weights_.router.to_f32();
  if (!router_f32_.is_contiguous()) router_f32_ = Tensor();  // the reference router reads strided rows
}

LayerOutput MoeLayer::forward(const Tensor& input) {
  const int64_t H = config_.hidden_size;
  const Tensor x = layer_input_f32(input, H);  // [T, H] F32
  const int64_t T = x.size(0);
  const int E = config_.router.n_experts, k = config_.router.top_k;
  LayerOutput out;

  auto start = Clock::now();
  const Tensor logits = router_f32_.defined() ? cpu::router_logits_fast(x, router_f32_)
                                              : cpu::router_logits(x, weights_.router);  // [T, E]
  out.topk.ids = Tensor::empty(DType::I32, {T, k});
  out.topk.weights = Tensor::empty(DType::F32, {T, k});
  const Tensor& bias = weights_.correction_bias;
  routing::route(config_.router, {logits.data_as<float>(), static_cast<size_t>(T * E)},
                 bias.defined() ? std::span<const float>(bias.data_as<float>(), E) : std::span<const float>(), T,
                 {out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)},
                 {out.topk.weights.data_as<float>(), static_cast<size_t>(T * k)});
  out.timings.router_ms = ms_since(start);

  start = Clock::now();
  const ExpertBatch batch = prepare_->prepare(x, out.topk);
  out.timings.prepare_ms = ms_since(start);
  start = Clock::now();
  if (fused_) {
    out.hidden_states = Tensor::zeros(DType::F32, {T, H});  // [T, H]
    fused_->run(x, batch, out.hidden_states);
    out.timings.experts_ms = ms_since(start);
  } else {
    const Tensor expert_out = experts_->run(batch);  // [n_rows, H]
    out.timings.experts_ms = ms_since(start);
    start = Clock::now();
    out.hidden_states = finalize_->finalize(expert_out, batch);  // [T, H]
    out.timings.finalize_ms = ms_since(start);
  }

  start = Clock::now();
  if (shared_packed_) {
    // The shared expert on the fast kernels: every token, weight 1 or sigmoid(x · shared_gateᵀ).
    std::vector<int32_t> tokens(T);
    std::iota(tokens.begin(), tokens.end(), 0);
    std::vector<float> gate(T, 1.0f);
    if (config_.shared == SharedExpertKind::sigmoid_gated) {
      const Tensor gate_logit = cpu::router_logits(x, weights_.shared_gate);  // [T, 1]
      for (int64_t t = 0; t < T; ++t)
        gate[t] = static_cast<float>(1.0 / (1.0 + std::exp(-double{gate_logit.data_as<float>()[t]})));
    }
    const cpu::ExpertRows shared{.expert = shared_packed_.get(), .token = tokens.data(), .weight = gate.data(), .count = T};
    cpu::fused_swiglu_experts({&shared, 1}, x, out.hidden_states, isa_, prefetch_);
  } else {
    add_shared_experts_reference(config_, weights_, x, out.hidden_states);
  }
  out.timings.shared_ms = ms_since(start);

  out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T, k, E,
                                          {batch.dropped_per_expert.data_as<int64_t>(), static_cast<size_t>(E)},
                                          batch.capacity);
  return out;
}

}  // namespace moe
