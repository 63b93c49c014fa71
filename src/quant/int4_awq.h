#pragma once
// INT4 W4A16, group-wise, in AutoAWQ's GEMM layout (quant_method "awq", version "gemm": what AWQ MoE
// checkpoints on the Hub hold, e.g. Mixtral, Qwen-MoE and DeepSeek AWQ releases). For a linear of N outputs
// and K inputs, group size G (G divides K), a module `X` holds:
//   X.qweight [K, N / 8] I32   input-major; int32 column c packs outputs 8c .. 8c + 7
//   X.qzeros  [K / G, N / 8] I32  the zero point of each group and output, packed the same way
//   X.scales  [K / G, N] F16
// weight[n][k] = (q[k][n] - z[k / G][n]) x scales[k / G][n], q and z unsigned 4-bit. The packing order is
// AutoAWQ's: nibble i (bits 4i .. 4i + 3) of a packed int32 holds output 8c + kAwqPackOrder[i], i.e.
// output 8c + j sits at nibble kAwqUnpackNibble[j]. (GPTQ's layout, packed along K in natural order, is not
// read.) Activations stay bf16 (W4A16); on the CPU the weights are dequantised at load.

#include <array>
#include <cstdint>
#include <string>

#include "moe/core/tensor.h"

namespace moe::quant {

inline constexpr std::array<int, 8> kAwqPackOrder{0, 2, 4, 6, 1, 3, 5, 7};
inline constexpr std::array<int, 8> kAwqUnpackNibble{0, 4, 1, 5, 2, 6, 3, 7};

// Eight 4-bit values of consecutive outputs (v[j]: output 8c + j, 0..15) as one AWQ-packed int32, and back.
uint32_t awq_pack8(const std::array<uint8_t, 8>& v);
uint8_t awq_unpack(uint32_t packed, int j);

struct AwqInt4Weight {
  Tensor qweight;  // [K, N / 8] I32
  Tensor qzeros;   // [K / G, N / 8] I32
  Tensor scales;   // [K / G, N] F16
};

// Round-to-nearest asymmetric quantisation of w [N, K] (any float dtype), as AutoAWQ's
// pseudo_quantize_tensor with zero_point: per group of G inputs of one output,
// scale = max(max - min, 1e-5) / 15 (rounded to f16, then used), zero = clamp(round(-min / scale), 0, 15),
// q = clamp(round(w / scale) + zero, 0, 15). Needs N % 8 == 0 and K % G == 0. (AWQ's activation-aware
// scale search is not run: it needs calibration activations per linear; this is its RTN baseline.)
AwqInt4Weight quantize_awq_int4(const Tensor& w, int64_t group_size);

// Checks a stored triple against N, K and G (dtypes, shapes, every scale finite and > 0); errors name
// `module` (the linear's name, e.g. "model.layers.1.mlp.experts.3.gate_proj").
void check_awq_int4(const AwqInt4Weight& w, int64_t group_size, const std::string& module);

// The weight [N, K] in `out` (F32 or BF16). Checks first (check_awq_int4).
Tensor dequantize_awq_int4(const AwqInt4Weight& w, int64_t group_size, DType out, const std::string& module);

}  // namespace moe::quant
