#include "moe/quant/weight_format.h"

namespace moe::quant {

std::string_view weight_format_name(WeightFormat format) { return format == WeightFormat::bf16 ? "bf16" : "int8"; }

}  // namespace moe::quant
