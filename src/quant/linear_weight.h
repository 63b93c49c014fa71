#pragma once
// Reading a linear weight from a checkpoint whatever its format, by the name a float checkpoint gives it
// ("model.layers.1.mlp.experts.3.gate_proj.weight", or a fused "model.layers.1.mlp.experts.gate_up_proj"):
//   float (F32, BF16, F16)  the zero-copy view as stored
//   F8_E4M3                 with "<name>_scale_inv" (fused tensors also early transformers 5's
//                           "<name>_scales_inv"), dequantised under the scheme's block size
//   AWQ                     "<module>.qweight", ".qzeros", ".scales" in place of "<module>.weight",
//                           dequantised under the scheme's group size
// Quantised weights come back as new BF16 tensors (what the CPU's fast experts pack from; the reference
// experts read them exactly). Callers check the shape.

#include <string>

#include "moe/core/checkpoint.h"
#include "moe/quant/quant_scheme.h"

namespace moe::quant {

// Whether `name` exists in any of the forms above.
bool has_linear_weight(const Checkpoint& checkpoint, const std::string& name);

// The weight, dequantised where stored quantised. Errors name the tensor: a quantised weight the scheme does
// not describe (an F8_E4M3 weight without an fp8 quantization_config), missing or bad scales (shape, NaN,
// zero), a block or group size that does not fit.
Tensor load_linear_weight(const Checkpoint& checkpoint, const std::string& name, const QuantScheme& scheme);

// The name of the block scales of fp8 weight `name` as this checkpoint spells it (see above).
std::string fp8_scale_name(const Checkpoint& checkpoint, const std::string& name);

}  // namespace moe::quant
