#include "moe/layer/moe_layer.h"

#include <chrono>
#include <cmath>

#include "moe/cpu/ops.h"

namespace moe {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

Tensor checked_input(const Tensor& x, int64_t hidden) {
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

}  // namespace

MoeLayer::MoeLayer(MoeConfig config, MoeWeights weights, LayerOptions options)
    : config_(std::move(config)), weights_(std::move(weights)), options_(options) {
  routing::validate(config_.router);
  MOE_CHECK(static_cast<int>(weights_.experts.size()) == config_.router.n_experts, "{} expert weights for {} experts",
            weights_.experts.size(), config_.router.n_experts);
  const int E = config_.router.n_experts;
  prepare_ = options_.paradigm == Paradigm::contiguous
                 ? make_local_contiguous_prepare(E)
                 : make_local_padded_prepare(E, options_.capacity_factor, options_.overflow);
  if (options_.paradigm == Paradigm::padded) expert_capacity(options_.capacity_factor, 1, 1, E);  // validates
  experts_ = make_cpu_reference_experts(weights_.experts);
  finalize_ = make_local_finalize();
}

LayerOutput MoeLayer::forward(const Tensor& input) {
  const int64_t H = config_.hidden_size;
  const Tensor x = checked_input(input, H);  // [T, H] F32
  const int64_t T = x.size(0);
  const int E = config_.router.n_experts, k = config_.router.top_k;
  LayerOutput out;

  auto start = Clock::now();
  const Tensor logits = cpu::router_logits(x, weights_.router);  // [T, E]
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
  const Tensor expert_out = experts_->run(batch);  // [n_rows, H]
  out.timings.experts_ms = ms_since(start);
  start = Clock::now();
  out.hidden_states = finalize_->finalize(expert_out, batch);  // [T, H]
  out.timings.finalize_ms = ms_since(start);

  start = Clock::now();
  if (config_.shared != SharedExpertKind::none) {
    const Tensor shared = cpu::swiglu_mlp(x, weights_.shared);  // [T, H]
    Tensor gate_logit;                                          // [T, 1]
    if (config_.shared == SharedExpertKind::sigmoid_gated) gate_logit = cpu::router_logits(x, weights_.shared_gate);
    float* y = out.hidden_states.data_as<float>();
    const float* s = shared.data_as<float>();
    for (int64_t t = 0; t < T; ++t) {
      const double gate = gate_logit.defined() ? 1.0 / (1.0 + std::exp(-double{gate_logit.data_as<float>()[t]})) : 1.0;
      for (int64_t h = 0; h < H; ++h) y[t * H + h] = static_cast<float>(y[t * H + h] + gate * s[t * H + h]);
    }
  }
  out.timings.shared_ms = ms_since(start);

  out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T, k, E,
                                          {batch.dropped_per_expert.data_as<int64_t>(), static_cast<size_t>(E)},
                                          batch.capacity);
  return out;
}

}  // namespace moe
