#include "moe/layer/moe_layer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace moe {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The counters of a host batch, or of a device one copied over by the stages.
std::vector<int64_t> counts_on_host(const LayerStages& stages, const Tensor& counts, Stream stream) {
  if (!counts.defined()) return {};
  if (counts.device() != Device::cpu) {
    MOE_CHECK(stages.counts_to_host, "device stages without a way to read their counters back (counts_to_host)");
    return stages.counts_to_host(counts, stream);
  }
  const int64_t n = counts.numel();
  if (counts.dtype() == DType::I64) return {counts.data_as<int64_t>(), counts.data_as<int64_t>() + n};
  return {counts.data_as<int32_t>(), counts.data_as<int32_t>() + n};
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

void check_output_finite(const Tensor& out, const TopK& topk, const std::string& block) {
  const int64_t T = out.size(0), H = out.size(1);
  const float* y = out.data_as<float>();
  std::vector<bool> bad(T, false);  // [T]
  int64_t first = -1, n_bad = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H && !bad[t]; ++h) bad[t] = !std::isfinite(y[t * H + h]);
    if (bad[t] && first < 0) first = t;
    n_bad += bad[t];
  }
  if (n_bad == 0) return;
  // Only now, on failure: the experts every non-finite token chose and no finite token did.
  const int64_t K = topk.ids.defined() ? topk.ids.size(1) : 0;
  const int32_t* ids = K > 0 ? topk.ids.data_as<int32_t>() : nullptr;
  std::vector<int32_t> suspects(ids ? ids + first * K : nullptr, ids ? ids + (first + 1) * K : nullptr);
  for (int64_t t = 0; t < T; ++t) {
    const auto chose = [&](int32_t e) { return std::find(ids + t * K, ids + (t + 1) * K, e) != ids + (t + 1) * K; };
    std::erase_if(suspects, [&](int32_t e) { return bad[t] != chose(e); });
  }
  std::string who = "no expert explains it: look at the router and the shared experts";
  if (suspects.size() == 1)
    who = fmt::format("expert {} explains it (every such token chose it, no finite one did)", suspects.front());
  else if (suspects.size() > 1)
    who = fmt::format("one of experts {} explains it (every such token chose them, no finite one did)",
                      fmt::join(suspects, ", "));
  MOE_FAIL("{}: the MoE block's output is not finite (NaN/Inf in {} of {} tokens, the first token {}); {}; check "
           "the checkpoint's weights for NaN/Inf", block, n_bad, T, first, who);
}

MoeLayer::MoeLayer(MoeConfig config, MoeWeights weights, LayerOptions options)
    : MoeLayer(config, make_cpu_stages(config, std::move(weights), options)) {}

MoeLayer::MoeLayer(MoeConfig config, LayerStages stages) : config_(std::move(config)), stages_(std::move(stages)) {
  MOE_CHECK(stages_.router && stages_.prepare, "a MoE layer needs a router and a prepare stage");
  MOE_CHECK(stages_.fused ? !stages_.experts && !stages_.finalize : stages_.experts && stages_.finalize,
            "a MoE layer needs either experts and finalize stages or a fused experts stage, not both");
}

void MoeLayer::run(const Tensor& x, const TopK& topk, Tensor& out, Stream stream, LayerTimings* timings) {
  const auto lap = [&](double LayerTimings::*field, Clock::time_point start) {
    if (timings) timings->*field = ms_since(start);
  };
  const int64_t T = x.size(0);
  if (stages_.small_batch && T <= stages_.small_batch->max_tokens()) {
    last_ = stages_.small_batch->forward(x, topk, out, stream);
    return;
  }
  auto start = Clock::now();
  RouterOutput routed;
  routed.topk = topk;
  stages_.router->route(x, routed, stream);
  lap(&LayerTimings::router_ms, start);

  start = Clock::now();
  const ExpertBatch batch = stages_.prepare->prepare(x, topk, stream);
  lap(&LayerTimings::prepare_ms, start);
  start = Clock::now();
  if (stages_.fused) {
    MOE_CHECK(out.device() == Device::cpu, "the fused experts stage adds into a host output");
    if (out.nbytes() > 0) std::memset(out.data(), 0, out.nbytes());
    stages_.fused->run(x, batch, out, stream);
    lap(&LayerTimings::experts_ms, start);
  } else {
    const Tensor expert_out = stages_.experts->run(batch, stream);  // [n_rows, H]
    lap(&LayerTimings::experts_ms, start);
    start = Clock::now();
    stages_.finalize->finalize(x, routed, expert_out, batch, out, stream);  // [T, H]
    lap(&LayerTimings::finalize_ms, start);
  }

  start = Clock::now();
  if (stages_.shared) stages_.shared->add(x, routed, out, stream);
  lap(&LayerTimings::shared_ms, start);
  last_ = ExpertBatch();
  last_.dropped_per_expert = batch.dropped_per_expert;
  last_.routed_counts = batch.routed_counts;
  last_.capacity = batch.capacity;
}

LayerOutput MoeLayer::forward(const Tensor& input) {
  if (stages_.device != Device::cpu) {
    MOE_CHECK(stages_.host_forward, "device stages without a host path (host_forward)");
    return stages_.host_forward(*this, input);
  }
  const int64_t H = config_.hidden_size;
  const Tensor x = layer_input_f32(input, H);  // [T, H] F32
  const int64_t T = x.size(0);
  const int E = config_.router.n_experts, k = config_.router.top_k;
  LayerOutput out;
  out.topk.ids = Tensor::empty(DType::I32, {T, k});
  out.topk.weights = Tensor::empty(DType::F32, {T, k});
  out.hidden_states = Tensor::empty(DType::F32, {T, H});  // [T, H]
  run(x, out.topk, out.hidden_states, Stream(), &out.timings);
  const std::vector<int64_t> dropped = counts_on_host(stages_, last_.dropped_per_expert, Stream());
  out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T, k, E,
                                          dropped, last_.capacity);
  return out;
}

void MoeLayer::forward(const Tensor& x, const TopK& topk, Tensor& out, Stream stream) {
  const int64_t T = x.size(0);
  MOE_CHECK(stages_.max_tokens == 0 || (T >= 0 && T <= stages_.max_tokens),
            "{} tokens exceed the workspace of {} (max_tokens)", T, stages_.max_tokens);
  // NOTE: device kernels cannot launch an empty grid; a batch of no tokens enqueues nothing there.
  if (T == 0 && stages_.device != Device::cpu) return;
  run(x, topk, out, stream, nullptr);
}

LoadCounts MoeLayer::read_counts(Stream stream) const {
  return {.tokens_per_expert = counts_on_host(stages_, last_.routed_counts, stream),
          .dropped_per_expert = counts_on_host(stages_, last_.dropped_per_expert, stream),
          .capacity = last_.capacity};
}

std::string MoeLayer::describe_path(int64_t n_tokens) const {
  return stages_.describe_path ? stages_.describe_path(n_tokens) : std::string();
}

}  // namespace moe
