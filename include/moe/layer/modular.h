#pragma once
// The modular kernel: a MoE layer is router -> prepare -> experts -> finalize, and each stage is an
// interface with interchangeable implementations (local contiguous or padded dispatch, an all-to-all
// dispatch in expert parallelism; reference, optimised or GPU experts; local or all-to-all combine).
// A new backend or weight format implements one stage and touches nothing else.

#include <memory>
#include <span>

#include "moe/core/expert_batch.h"
#include "moe/cpu/fast_experts.h"

namespace moe {

// Regroups the tokens by expert (in EP: the all-to-all dispatch).
class Prepare {
 public:
  virtual ~Prepare() = default;
  // x [T, H] F32, topk [T, k] -> rows grouped by expert.
  virtual ExpertBatch prepare(const Tensor& x, const TopK& topk) = 0;
};

// Runs every expert's FFN on its rows.
class Experts {
 public:
  virtual ~Experts() = default;
  // -> [n_rows, H] F32, same row order as batch.rows; padding rows zero.
  virtual Tensor run(const ExpertBatch& batch) = 0;
};

// Brings expert outputs back to token order and sums them with their weights (in EP: the combine).
class Finalize {
 public:
  virtual ~Finalize() = default;
  // expert_out [n_rows, H] -> [T, H] F32.
  virtual Tensor finalize(const Tensor& expert_out, const ExpertBatch& batch) = 0;
};

// Experts and finalize as one stage: each expert's down projection accumulates straight into its tokens'
// output rows with the routing weight (no [n_rows, H] intermediate, no unpermute pass). It reads the token
// rows from x itself, so it needs only the batch's routing tables (expert_offsets/counts, row_token,
// pair_rows, pair_weights): an index-only prepare (rows of width 0) is enough.
class FusedExperts {
 public:
  virtual ~FusedExperts() = default;
  // x [T, H] F32; out [T, H] F32 += Σ_j pair_weights[t, j] · expert(x[t]) over the batch's kept pairs.
  virtual void run(const Tensor& x, const ExpertBatch& batch, Tensor& out) = 0;
};

// Local (single-rank) stages on the CPU. `copy_rows = false` gives an index-only batch (rows [n_rows, 0])
// for a FusedExperts stage.
std::unique_ptr<Prepare> make_local_contiguous_prepare(int n_experts, bool copy_rows = true);
// capacity = ceil(capacity_factor · T · k / E) rows per expert, first-come in token order.
std::unique_ptr<Prepare> make_local_padded_prepare(int n_experts, double capacity_factor, OverflowPolicy overflow,
                                                   bool copy_rows = true);
// Reference experts (fp64-accumulated) for experts [expert_begin, expert_begin + weights.size()).
std::unique_ptr<Experts> make_cpu_reference_experts(std::span<const SwigluWeights> weights, int expert_begin = 0);
std::unique_ptr<Finalize> make_local_finalize();
// Optimised CPU experts + finalize (moe/cpu/fast_experts.h) for experts [expert_begin, expert_begin +
// weights.size()): the weights are repacked (converted to bf16, or quantised to int8) here, once; the views
// in `weights` are not used afterwards.
std::unique_ptr<FusedExperts> make_cpu_fast_experts(std::span<const SwigluWeights> weights, quant::WeightFormat format,
                                                    int expert_begin = 0);

// ceil(capacity_factor · n_tokens · top_k / n_experts); throws for a factor that is not positive and finite.
int64_t expert_capacity(double capacity_factor, int64_t n_tokens, int top_k, int n_experts);

}  // namespace moe
