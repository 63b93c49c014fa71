// Single-rank stages of the modular kernel, on the CPU ops.
#include <cmath>

#include "moe/cpu/ops.h"
#include "moe/layer/modular.h"

namespace moe {

namespace {

class LocalContiguousPrepare final : public Prepare {
 public:
  explicit LocalContiguousPrepare(int n_experts) : n_experts_(n_experts) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk) override {
    return cpu::permute_contiguous(x, topk, n_experts_);
  }

 private:
  int n_experts_;
};

class LocalPaddedPrepare final : public Prepare {
 public:
  LocalPaddedPrepare(int n_experts, double capacity_factor, OverflowPolicy overflow)
      : n_experts_(n_experts), capacity_factor_(capacity_factor), overflow_(overflow) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk) override {
    const int64_t capacity =
        expert_capacity(capacity_factor_, x.size(0), static_cast<int>(topk.ids.size(1)), n_experts_);
    return cpu::permute_padded(x, topk, n_experts_, capacity, overflow_);
  }

 private:
  int n_experts_;
  double capacity_factor_;
  OverflowPolicy overflow_;
};

class CpuReferenceExperts final : public Experts {
 public:
  CpuReferenceExperts(std::span<const SwigluWeights> weights, int expert_begin)
      : weights_(weights), expert_begin_(expert_begin) {}
  Tensor run(const ExpertBatch& batch) override { return cpu::grouped_swiglu(batch, weights_, expert_begin_); }

 private:
  std::span<const SwigluWeights> weights_;
  int expert_begin_;
};

class LocalFinalize final : public Finalize {
 public:
  Tensor finalize(const Tensor& expert_out, const ExpertBatch& batch) override {
    return cpu::unpermute(expert_out, batch);
  }
};

}  // namespace

int64_t expert_capacity(double capacity_factor, int64_t n_tokens, int top_k, int n_experts) {
  MOE_CHECK(std::isfinite(capacity_factor) && capacity_factor > 0,
            "--capacity-factor must be a positive number, got {}", capacity_factor);
  const double rows = std::ceil(capacity_factor * static_cast<double>(n_tokens) * top_k / n_experts);
  MOE_CHECK(rows <= 1e12, "capacity factor {} gives {} rows per expert: too many", capacity_factor, rows);
  return static_cast<int64_t>(rows);
}

std::unique_ptr<Prepare> make_local_contiguous_prepare(int n_experts) {
  return std::make_unique<LocalContiguousPrepare>(n_experts);
}

std::unique_ptr<Prepare> make_local_padded_prepare(int n_experts, double capacity_factor, OverflowPolicy overflow) {
  return std::make_unique<LocalPaddedPrepare>(n_experts, capacity_factor, overflow);
}

std::unique_ptr<Experts> make_cpu_reference_experts(std::span<const SwigluWeights> weights, int expert_begin) {
  return std::make_unique<CpuReferenceExperts>(weights, expert_begin);
}

std::unique_ptr<Finalize> make_local_finalize() { return std::make_unique<LocalFinalize>(); }

}  // namespace moe
