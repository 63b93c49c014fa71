#pragma once
// RMSNorm on the CPU, as transformers' RMSNorm computes it in fp32 (normalise first, then multiply by the
// weight), with the sum of squares in fp64.

#include <cstdint>

#include "moe/core/tensor.h"

namespace moe::cpu {

// Each group of `width` columns of x [T, n] (F32 contiguous, in place; n a multiple of width):
// x * rsqrt(mean(x²) + eps) * weight, weight [width] F32. width = n: whole rows; width = head_dim: per head.
void rms_norm(Tensor& x, const Tensor& weight, double eps, int64_t width);

// The same over columns [0, width) of each row of x [T, n] (n >= width; the other columns are left as they
// are): MLA's latent inside the [latent | k_rot] projection.
void rms_norm_prefix(Tensor& x, const Tensor& weight, double eps, int64_t width);

// residual += delta (both [T, H] F32; delta may be undefined: nothing to add), then a normalised copy of
// residual's rows -> [T, H] F32: the decoder's residual add and the norm after it.
Tensor add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, double eps);

}  // namespace moe::cpu
