#pragma once
// The modular kernel: a MoE layer is router -> prepare -> experts -> finalize, and each stage is an
// interface with interchangeable implementations (local contiguous or padded dispatch, an all-to-all
// dispatch in expert parallelism; reference, optimised or GPU experts; local or all-to-all combine).
// A new backend or weight format implements one stage and touches nothing else.

#include <memory>
#include <span>

#include "moe/core/expert_batch.h"

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

enum class Paradigm : uint8_t { contiguous, padded };

// Local (single-rank) stages on the CPU.
std::unique_ptr<Prepare> make_local_contiguous_prepare(int n_experts);
// capacity = ceil(capacity_factor · T · k / E) rows per expert, first-come in token order.
std::unique_ptr<Prepare> make_local_padded_prepare(int n_experts, double capacity_factor, OverflowPolicy overflow);
// Reference experts (fp64-accumulated) for experts [expert_begin, expert_begin + weights.size()).
std::unique_ptr<Experts> make_cpu_reference_experts(std::span<const SwigluWeights> weights, int expert_begin = 0);
std::unique_ptr<Finalize> make_local_finalize();

// ceil(capacity_factor · n_tokens · top_k / n_experts); throws for a factor that is not positive and finite.
int64_t expert_capacity(double capacity_factor, int64_t n_tokens, int top_k, int n_experts);

}  // namespace moe
