// The local (single-rank) stages on the CPU ops, and the CPU bundle.
#include "moe/layer/cpu_stages.h"

#include <cmath>
#include <cstring>

#include <numeric>
#include <vector>

#include "cpu/fast_experts.h"
#include "cpu/ops.h"
#include "layer/shared_experts.h"

namespace moe {

namespace {

class CpuRouter final : public Router {
 public:
  CpuRouter(const MoeConfig& config, const MoeWeights& weights, bool fast)
      : config_(config.router), weight_(weights.router), bias_(weights.correction_bias) {
    if (!fast) return;
    router_f32_ = weights.router.to_f32();
    if (!router_f32_.is_contiguous()) router_f32_ = Tensor();  // the reference router reads strided rows
  }

  void route(const Tensor& x, RouterOutput& out, Stream) override {
    const int64_t T = x.size(0);
    const int E = config_.n_experts, k = config_.top_k;
    const Tensor logits = router_f32_.defined() ? cpu::router_logits_fast(x, router_f32_)
                                                : cpu::router_logits(x, weight_);  // [T, E]
    routing::route(config_, {logits.data_as<float>(), static_cast<size_t>(T * E)},
                   bias_.defined() ? std::span<const float>(bias_.data_as<float>(), E) : std::span<const float>(), T,
                   {out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)},
                   {out.topk.weights.data_as<float>(), static_cast<size_t>(T * k)});
  }

 private:
  routing::RouterConfig config_;
  Tensor weight_, bias_;  // [E, H], [E] or undefined
  Tensor router_f32_;     // [E, H] F32 for the vectorised logits, or undefined
};

// x itself, or (index-only) a [T, 0] view of it, so that the permute copies no rows.
Tensor rows_source(const Tensor& x, bool copy_rows) {
  return copy_rows ? x : Tensor::view(x.data(), DType::F32, {x.size(0), 0}, nullptr);
}

// [E] I64: the pairs routed to each expert, before any capacity limit.
Tensor count_routed(const TopK& topk, int n_experts) {
  Tensor counts = Tensor::zeros(DType::I64, {n_experts});
  int64_t* c = counts.data_as<int64_t>();
  const int32_t* ids = topk.ids.data_as<int32_t>();
  for (int64_t i = 0; i < topk.ids.numel(); ++i) ++c[ids[i]];
  return counts;
}

class LocalContiguousPrepare final : public Prepare {
 public:
  LocalContiguousPrepare(int n_experts, bool copy_rows) : n_experts_(n_experts), copy_rows_(copy_rows) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk, Stream) override {
    ExpertBatch batch = cpu::permute_contiguous(rows_source(x, copy_rows_), topk, n_experts_);
    batch.routed_counts = count_routed(topk, n_experts_);
    return batch;
  }

 private:
  int n_experts_;
  bool copy_rows_;
};

class LocalPaddedPrepare final : public Prepare {
 public:
  LocalPaddedPrepare(int n_experts, double capacity_factor, OverflowPolicy overflow, bool copy_rows)
      : n_experts_(n_experts), capacity_factor_(capacity_factor), overflow_(overflow), copy_rows_(copy_rows) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk, Stream) override {
    const int64_t capacity =
        expert_capacity(capacity_factor_, x.size(0), static_cast<int>(topk.ids.size(1)), n_experts_);
    ExpertBatch batch = cpu::permute_padded(rows_source(x, copy_rows_), topk, n_experts_, capacity, overflow_);
    batch.routed_counts = count_routed(topk, n_experts_);
    return batch;
  }

 private:
  int n_experts_;
  double capacity_factor_;
  OverflowPolicy overflow_;
  bool copy_rows_;
};

class CpuReferenceExperts final : public Experts {
 public:
  CpuReferenceExperts(std::span<const SwigluWeights> weights, int expert_begin)
      : weights_(weights), expert_begin_(expert_begin) {}
  Tensor run(const ExpertBatch& batch, Stream) override { return cpu::grouped_swiglu(batch, weights_, expert_begin_); }

 private:
  std::span<const SwigluWeights> weights_;
  int expert_begin_;
};

// The reference experts over weights the stage keeps alive itself (the CPU bundle's).
class OwningReferenceExperts final : public Experts {
 public:
  explicit OwningReferenceExperts(std::shared_ptr<const MoeWeights> weights) : weights_(std::move(weights)) {}
  Tensor run(const ExpertBatch& batch, Stream) override { return cpu::grouped_swiglu(batch, weights_->experts, 0); }

 private:
  std::shared_ptr<const MoeWeights> weights_;
};

class CpuFastExperts final : public FusedExperts {
 public:
  CpuFastExperts(std::span<const SwigluWeights> weights, quant::WeightFormat format, int expert_begin)
      : packed_(cpu::pack_experts(weights, format)), expert_begin_(expert_begin), isa_(cpu::detect_isa()),
        prefetch_(cpu::detect_stream_prefetch()) {}

  void run(const Tensor& x, const ExpertBatch& batch, Tensor& out, Stream) override {
    const int64_t n_rows = batch.row_token.size(0), n_pairs = batch.pair_rows.numel();
    const int64_t n_experts = batch.expert_counts.size(0);
    const int64_t expert_end = expert_begin_ + static_cast<int64_t>(packed_.size());
    MOE_CHECK(expert_begin_ >= 0 && expert_end <= n_experts, "expert range [{}, {}) outside the batch's {} experts",
              expert_begin_, expert_end, n_experts);
    // The combine weight of each row (the inverse of pair_rows).
    std::vector<float> row_weight(n_rows, 0.0f);  // [n_rows]
    const int32_t* pair_rows = batch.pair_rows.data_as<int32_t>();
    const float* pair_weights = batch.pair_weights.data_as<float>();
    for (int64_t i = 0; i < n_pairs; ++i) {
      if (pair_rows[i] < 0) continue;  // dropped by the capacity limit
      MOE_CHECK(pair_rows[i] < n_rows, "pair {} points at row {} of {}", i, pair_rows[i], n_rows);
      row_weight[pair_rows[i]] = pair_weights[i];
    }
    const int64_t* offset = batch.expert_offsets.data_as<int64_t>();
    const int64_t* count = batch.expert_counts.data_as<int64_t>();
    std::vector<cpu::ExpertRows> segments;
    for (int64_t e = expert_begin_; e < expert_end; ++e) {
      if (count[e] == 0) continue;
      MOE_CHECK(offset[e] >= 0 && offset[e] + count[e] <= n_rows, "expert {} rows [{}, {}) outside the batch's {}", e,
                offset[e], offset[e] + count[e], n_rows);
      segments.push_back({.expert = packed_[e - expert_begin_].get(),
                          .token = batch.row_token.data_as<int32_t>() + offset[e],
                          .weight = row_weight.data() + offset[e],
                          .count = count[e]});
    }
    cpu::fused_swiglu_experts(segments, x, out, isa_, prefetch_);
  }

 private:
  std::vector<cpu::PackedExpertPtr> packed_;
  int expert_begin_;
  cpu::Isa isa_;
  cpu::StreamPrefetch prefetch_;
};

class LocalFinalize final : public Finalize {
 public:
  void finalize(const Tensor&, const RouterOutput&, const Tensor& expert_out, const ExpertBatch& batch, Tensor& out,
                Stream) override {
    const Tensor y = cpu::unpermute(expert_out, batch);  // [T, H]
    MOE_CHECK(out.shape() == y.shape() && out.dtype() == DType::F32 && out.is_contiguous(),
              "the finalize's output is {} {}, expected a contiguous F32 {}", dtype_name(out.dtype()),
              out.shape_string(), y.shape_string());
    std::memcpy(out.data(), y.data(), y.nbytes());
  }
};

class ReferenceShared final : public SharedExperts {
 public:
  ReferenceShared(const MoeConfig& config, const MoeWeights& weights) : config_(config) {
    weights_.shared = weights.shared;
    weights_.shared_gate = weights.shared_gate;
  }
  void add(const Tensor& x, const RouterOutput&, Tensor& out, Stream) override {
    add_shared_experts_reference(config_, weights_, x, out);
  }

 private:
  MoeConfig config_;
  MoeWeights weights_;  // views of the shared expert and its gate only
};

// The shared expert on the fast kernels: every token, weight 1 or sigmoid(x · shared_gateᵀ).
class FastShared final : public SharedExperts {
 public:
  FastShared(const MoeConfig& config, const MoeWeights& weights, quant::WeightFormat format)
      : gated_(config.shared == SharedExpertKind::sigmoid_gated), gate_weight_(weights.shared_gate),
        packed_(cpu::pack_expert(weights.shared, format)), isa_(cpu::detect_isa()),
        prefetch_(cpu::detect_stream_prefetch()) {}

  void add(const Tensor& x, const RouterOutput&, Tensor& out, Stream) override {
    const int64_t T = x.size(0);
    std::vector<int32_t> tokens(T);
    std::iota(tokens.begin(), tokens.end(), 0);
    std::vector<float> gate(T, 1.0f);
    if (gated_) {
      const Tensor gate_logit = cpu::router_logits(x, gate_weight_);  // [T, 1]
      for (int64_t t = 0; t < T; ++t)
        gate[t] = static_cast<float>(1.0 / (1.0 + std::exp(-double{gate_logit.data_as<float>()[t]})));
    }
    const cpu::ExpertRows shared{.expert = packed_.get(), .token = tokens.data(), .weight = gate.data(), .count = T};
    cpu::fused_swiglu_experts({&shared, 1}, x, out, isa_, prefetch_);
  }

 private:
  bool gated_;
  Tensor gate_weight_;  // [1, H] for the sigmoid-gated kind
  cpu::PackedExpertPtr packed_;
  cpu::Isa isa_;
  cpu::StreamPrefetch prefetch_;
};

}  // namespace

int64_t expert_capacity(double capacity_factor, int64_t n_tokens, int top_k, int n_experts) {
  MOE_CHECK(std::isfinite(capacity_factor) && capacity_factor > 0,
            "the capacity factor must be a positive, finite number, got {}", capacity_factor);
  const double rows = std::ceil(capacity_factor * static_cast<double>(n_tokens) * top_k / n_experts);
  MOE_CHECK(rows <= 1e12, "capacity factor {} gives {} rows per expert: too many", capacity_factor, rows);
  return static_cast<int64_t>(rows);
}

std::unique_ptr<Router> make_cpu_router(const MoeConfig& config, const MoeWeights& weights, bool fast) {
  return std::make_unique<CpuRouter>(config, weights, fast);
}

std::unique_ptr<Prepare> make_local_contiguous_prepare(int n_experts, bool copy_rows) {
  return std::make_unique<LocalContiguousPrepare>(n_experts, copy_rows);
}

std::unique_ptr<Prepare> make_local_padded_prepare(int n_experts, double capacity_factor, OverflowPolicy overflow,
                                                   bool copy_rows) {
  return std::make_unique<LocalPaddedPrepare>(n_experts, capacity_factor, overflow, copy_rows);
}

std::unique_ptr<Experts> make_cpu_reference_experts(std::span<const SwigluWeights> weights, int expert_begin) {
  return std::make_unique<CpuReferenceExperts>(weights, expert_begin);
}

std::unique_ptr<Finalize> make_local_finalize() { return std::make_unique<LocalFinalize>(); }

std::unique_ptr<FusedExperts> make_cpu_fast_experts(std::span<const SwigluWeights> weights, quant::WeightFormat format,
                                                    int expert_begin) {
  return std::make_unique<CpuFastExperts>(weights, format, expert_begin);
}

std::unique_ptr<SharedExperts> make_cpu_reference_shared(const MoeConfig& config, const MoeWeights& weights) {
  if (config.shared == SharedExpertKind::none) return nullptr;
  return std::make_unique<ReferenceShared>(config, weights);
}

std::unique_ptr<SharedExperts> make_cpu_fast_shared(const MoeConfig& config, const MoeWeights& weights,
                                                    quant::WeightFormat format) {
  if (config.shared == SharedExpertKind::none) return nullptr;
  return std::make_unique<FastShared>(config, weights, format);
}

LayerStages make_cpu_stages(const MoeConfig& config, MoeWeights weights, const LayerOptions& options) {
  routing::validate(config.router);
  const int E = config.router.n_experts;
  MOE_CHECK(static_cast<int>(weights.experts.size()) == E, "{} expert weights for {} experts", weights.experts.size(),
            E);
  if (options.paradigm == Paradigm::padded) expert_capacity(options.capacity_factor, 1, 1, E);  // validates
  // NOTE: a CPU without AVX2 runs the reference experts whatever was asked (the fast kernels need it).
  const bool fast = options.cpu_experts == CpuExperts::fast && cpu::fast_experts_available();
  LayerStages stages;
  stages.router = make_cpu_router(config, weights, fast);
  stages.prepare = options.paradigm == Paradigm::contiguous
                       ? make_local_contiguous_prepare(E, /*copy_rows=*/!fast)
                       : make_local_padded_prepare(E, options.capacity_factor, options.overflow, /*copy_rows=*/!fast);
  if (!fast) {
    auto owned = std::make_shared<const MoeWeights>(std::move(weights));
    stages.experts = std::make_unique<OwningReferenceExperts>(owned);
    stages.finalize = make_local_finalize();
    stages.shared = make_cpu_reference_shared(config, *owned);
    return stages;
  }
  // NOTE: the packed copies are all the fast path reads; the views in `weights` die with this call, which
  // frees converted or random weights.
  stages.fused = make_cpu_fast_experts(weights.experts, options.cpu_weights);
  stages.shared = make_cpu_fast_shared(config, weights, options.cpu_weights);
  return stages;
}

}  // namespace moe
