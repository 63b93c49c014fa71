#pragma once
// The dense ops of the decoder on the CPU in fp32: linear layers (vectorised fp32 multiply-add on the
// weights in their checkpoint dtype, linear_kernels.h: nothing is copied or converted at load time),
// RMSNorm (fp64 sums), SwiGLU MLP, embedding rows. fp32 accumulation keeps the model within ~1e-6 of
// transformers' fp32 run on the fixtures, far inside their 1e-4.

#include <cstdint>
#include <span>

#include "linear_kernels.h"
#include "moe/core/expert_batch.h"
#include "moe/core/tensor.h"

namespace moe::model {

// y = x · Wᵀ (+ bias).  x [T, in] F32 contiguous, W [out, in] any float dtype (rows contiguous),
// bias [out] F32 or undefined -> [T, out] F32. Threads split the output rows; tokens go in blocks, so each
// weight row is read once per block of 64 tokens. `isa`: the kernels' build (tests run each).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, LinearIsa isa = linear_isa());

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
