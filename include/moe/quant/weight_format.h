#pragma once
// How expert weights are stored for the kernels that run them. Every backend reads these names; the
// (de)quantisation of each format lives beside it in quant/.

#include <cstdint>
#include <string_view>

namespace moe::quant {

enum class WeightFormat : uint8_t {
  bf16,  // any float checkpoint converted (RNE) to bf16 at load
  int8,  // symmetric per-output-channel int8, quantised from the bf16 values at load; activations int8 per token
};
// "bf16", "int8".
std::string_view weight_format_name(WeightFormat format);

}  // namespace moe::quant
