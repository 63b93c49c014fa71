#pragma once
// FP8 e4m3 block-scaled weights, DeepSeek-V3's format: an [N, K] weight (N outputs, K inputs) is stored as
// e4m3 values [N, K] and one fp32 scale per block of block.n x block.k values,
// `<name>_scale_inv` [ceil(N / block.n), ceil(K / block.k)] (edge blocks are partial);
// weight = float(e4m3) x scale_inv. Leading dimensions (transformers' fused experts [E, N, K]) carry over
// to the scales ([E, nb, kb]). The W8A8 path quantises activations per token and 128-wide group with
// scale = amax / 448 on the fly (quantize_fp8_activations: the oracle for a GPU kernel).
// e4m3 here is "fn" (no inf, max 448, NaN = S.1111.111); the bit conversions are core/float_convert.h's.

#include <cstdint>
#include <string>

#include "moe/core/tensor.h"

namespace moe::quant {

inline constexpr float kFp8E4m3Max = 448.0f;

// config.json weight_block_size [n, k]: rows (outputs) then columns (inputs) of one scale block.
struct Fp8BlockShape {
  int64_t n = 128;
  int64_t k = 128;
};

// e4m3 of x clamped to +-448 first (saturating, as every fp8 recipe does: torch's clamp then cast); NaN
// stays NaN.
uint8_t fp8_e4m3_saturate(float x);

struct Fp8BlockWeight {
  Tensor values;     // [..., N, K] F8_E4M3
  Tensor scale_inv;  // [..., ceil(N / block.n), ceil(K / block.k)] F32
};

// Quantises w [..., N, K] (any float dtype): per block scale_inv = amax / 448 (an all-zero block gets 1, as
// transformers does), values = saturate(w / scale_inv).
Fp8BlockWeight quantize_fp8_block(const Tensor& w, Fp8BlockShape block);

// Checks a stored pair before use: values F8_E4M3 of rank >= 2; scale_inv F32, BF16 or F16 of the shape the
// block size implies; every scale finite and > 0. Errors name `name` (the weight's tensor name), what was
// found and what was expected.
void check_fp8_block(const Tensor& values, const Tensor& scale_inv, Fp8BlockShape block, const std::string& name);

// weight = float(values) x scale_inv as a new [..., N, K] tensor of `out` (F32 or BF16; bf16 rounds the
// fp32 product once, as torch's dequantise-then-cast does). Checks first (check_fp8_block).
Tensor dequantize_fp8_block(const Tensor& values, const Tensor& scale_inv, Fp8BlockShape block, DType out,
                            const std::string& name);

// Dynamic activation quantisation of the W8A8 path: x [T, K] F32 -> values [T, K] F8_E4M3 and scales
// [T, ceil(K / group)] F32, scale = amax / 448 of each token's group (1 for an all-zero group),
// values = saturate(x / scale).
struct Fp8Activations {
  Tensor values;  // [T, K] F8_E4M3
  Tensor scales;  // [T, ceil(K / group)] F32
};
Fp8Activations quantize_fp8_activations(const Tensor& x, int64_t group = 128);
// x ~= float(values) x scale, [T, K] F32.
Tensor dequantize_fp8_activations(const Fp8Activations& a, int64_t group = 128);

}  // namespace moe::quant
