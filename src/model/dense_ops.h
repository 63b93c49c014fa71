#pragma once
// The dense ops of the decoder on the CPU, in fp32 with fp64-accumulated dot products (the same
// precision contract as the CPU MoE reference ops, so that the model matches transformers' fp32 run to
// ~1e-6): linear layers, RMSNorm, SwiGLU MLP, embedding rows. Weights are read in their checkpoint dtype
// (F32 used in place; BF16/F16 rows converted per use into a small per-thread buffer), so nothing is
// copied at load time.

#include <cstdint>
#include <span>

#include "moe/core/expert_batch.h"
#include "moe/core/tensor.h"

namespace moe::model {

// y = x · Wᵀ (+ bias).  x [T, in] F32 contiguous, W [out, in] any float dtype (rows contiguous),
// bias [out] F32 or undefined -> [T, out] F32.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// y = x · W for a weight stored [in, out] (a linear layer's weight used transposed, as MLA's absorbed
// kv_b_proj needs).  x [T, in] F32 contiguous, W [in, out] any float dtype (rows contiguous) -> [T, out] F32.
// Runs on the calling thread (callers parallelise over heads).
Tensor linear_transposed(const Tensor& x, const Tensor& weight);

// Each row of x [T, n] (F32, in place): x * rsqrt(mean(x²) + eps) * weight, weight [n] F32, as
// transformers' RMSNorm computes it in fp32 (normalise first, then multiply by the weight).
void rms_norm_rows(Tensor& x, const Tensor& weight, double eps);
// The same over groups of `width` columns (per-head norms): x [T, n] with n a multiple of width.
void rms_norm_groups(Tensor& x, const Tensor& weight, double eps, int64_t width);

// down · (silu(gate · x) ⊙ (up · x)) for every row of x [T, H] F32 -> [T, H] F32.
Tensor dense_swiglu(const Tensor& x, const SwigluWeights& weights);

// Rows `ids` of an embedding table [V, H] (any float dtype) -> [n, H] F32; an id outside [0, V) is a
// moe::Error naming it.
Tensor embedding_rows(const Tensor& table, std::span<const int32_t> ids);

// a += b, both [T, H] F32 contiguous.
void add_in_place(Tensor& a, const Tensor& b);

}  // namespace moe::model
