#pragma once
// CPU ops of the MoE layer, one file each under src/cpu/ (same names as the CUDA ops). Reference
// precision: fp32 data, dot products accumulated in fp64 and rounded once, so that these are the oracle
// for every optimised path. Work is spread over the process thread pool.

#include <cstdint>
#include <span>

#include "moe/core/expert_batch.h"

namespace moe::cpu {

// router.cpp: logits = x · gate_weightᵀ.  x [T, H] F32, gate_weight [E, H] any float dtype -> [T, E] F32.
Tensor router_logits(const Tensor& x, const Tensor& gate_weight);

// permute.cpp: regroups the (token, expert) pairs of topk by expert, stably (token order inside an expert).
//   x [T, H] F32, topk [T, k]. Contiguous layout: every pair kept.
ExpertBatch permute_contiguous(const Tensor& x, const TopK& topk, int n_experts);
//   Padded layout with `capacity` rows per expert, filled first-come in token order; pairs beyond it are
//   dropped and the token's weights follow `overflow`.
ExpertBatch permute_padded(const Tensor& x, const TopK& topk, int n_experts, int64_t capacity,
                           OverflowPolicy overflow);

// grouped_gemm.cpp: the SwiGLU FFN of expert e on its rows, for every e in [expert_begin, expert_end).
//   experts[e - expert_begin] are the weights of expert e; returns [n_rows, H] F32 (padding rows zero).
Tensor grouped_swiglu(const ExpertBatch& batch, std::span<const SwigluWeights> experts, int expert_begin);

// activation.cpp: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), evaluated in fp64.
void silu_and_mul(std::span<const float> gate, std::span<const float> up, std::span<float> out);

// grouped_gemm.cpp: one dense SwiGLU MLP on every row. rows [n, H] F32 -> [n, H] F32.
Tensor swiglu_mlp(const Tensor& rows, const SwigluWeights& weights);

// unpermute.cpp: out[t] = sum_j pair_weights[t, j] · expert_out[pair_rows[t, j]] (dropped pairs skipped),
// summed in pair order: deterministic, no atomics. expert_out [n_rows, H] -> [T, H] F32.
Tensor unpermute(const Tensor& expert_out, const ExpertBatch& batch);

}  // namespace moe::cpu
