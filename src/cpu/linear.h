#pragma once
// Linear layers on the CPU in fp32: vectorised fp32 multiply-add on the weights in their checkpoint dtype
// (F32, BF16 or F16, converted in registers: nothing is copied or converted at load time). fp32
// accumulation keeps the model within ~1e-6 of transformers' fp32 run on the fixtures, far inside their 1e-4.

#include <cstdint>

#include "moe/core/tensor.h"

namespace moe::cpu {

// The kernels' builds (linear_kernels.h): AVX-512F, AVX2 + FMA + F16C, and plain C++.
enum class LinearIsa : uint8_t { scalar, avx2, avx512 };

// The best this CPU runs; MOE_CPU_ISA=avx2 forces AVX2 (as it does for the fast experts), for tests.
LinearIsa linear_isa();

// y = x · Wᵀ (+ bias).  x [T, in] F32 contiguous, W [out, in] any float dtype (rows contiguous),
// bias [out] F32 or undefined -> [T, out] F32. Threads split the output rows; tokens go in blocks, so each
// weight row is read once per block of 64 tokens. `isa`: the kernels' build (tests run each).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, LinearIsa isa = linear_isa());

// down · (silu(gate · x) ⊙ (up · x)) for every row of x [T, H] F32, gate/up [I, H], down [H, I] -> [T, H] F32
// (the dense MLP of the decoder's non-MoE layers; silu in fp64).
Tensor swiglu_mlp(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down);

// The absorbed products of multi-head latent attention, per head h of `heads`, with kv_b [heads · (nope +
// dv), rank] (any float dtype) holding W_uk[h] (nope rows) then W_uv[h] (dv rows) for each head:
// queries into the latent space: q [T, heads, nope + rope] -> [T, heads, rank + rope] = [W_uk[h]ᵀ q_nope | q_rot];
struct MlaDims {
  int64_t heads = 0, nope = 0, rope = 0, v = 0, rank = 0;
};
Tensor mla_absorb_queries(const Tensor& q, const Tensor& kv_b, const MlaDims& dims);
// and back: context [T, heads, rank] -> [T, heads · v] = W_uv[h] · context[h].
Tensor mla_expand_context(const Tensor& context, const Tensor& kv_b, const MlaDims& dims);

}  // namespace moe::cpu
