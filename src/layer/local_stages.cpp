// Single-rank stages of the modular kernel, on the CPU ops.
#include <cmath>

#include <vector>

#include "moe/cpu/fast_experts.h"
#include "moe/cpu/ops.h"
#include "moe/layer/modular.h"

namespace moe {

namespace {

// x itself, or (index-only) a [T, 0] view of it, so that the permute copies no rows.
Tensor rows_source(const Tensor& x, bool copy_rows) {
  return copy_rows ? x : Tensor::view(x.data(), DType::F32, {x.size(0), 0}, nullptr);
}

class LocalContiguousPrepare final : public Prepare {
 public:
  LocalContiguousPrepare(int n_experts, bool copy_rows) : n_experts_(n_experts), copy_rows_(copy_rows) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk) override {
    return cpu::permute_contiguous(rows_source(x, copy_rows_), topk, n_experts_);
  }

 private:
  int n_experts_;
  bool copy_rows_;
};

class LocalPaddedPrepare final : public Prepare {
 public:
  LocalPaddedPrepare(int n_experts, double capacity_factor, OverflowPolicy overflow, bool copy_rows)
      : n_experts_(n_experts), capacity_factor_(capacity_factor), overflow_(overflow), copy_rows_(copy_rows) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk) override {
    const int64_t capacity =
        expert_capacity(capacity_factor_, x.size(0), static_cast<int>(topk.ids.size(1)), n_experts_);
    return cpu::permute_padded(rows_source(x, copy_rows_), topk, n_experts_, capacity, overflow_);
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
  Tensor run(const ExpertBatch& batch) override { return cpu::grouped_swiglu(batch, weights_, expert_begin_); }

 private:
  std::span<const SwigluWeights> weights_;
  int expert_begin_;
};

class CpuFastExperts final : public FusedExperts {
 public:
  CpuFastExperts(std::span<const SwigluWeights> weights, quant::WeightFormat format, int expert_begin)
      : packed_(cpu::pack_experts(weights, format)), expert_begin_(expert_begin), isa_(cpu::detect_isa()),
        prefetch_(cpu::detect_stream_prefetch()) {}

  void run(const Tensor& x, const ExpertBatch& batch, Tensor& out) override {
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

}  // namespace moe
