#pragma once
// How a checkpoint's linear weights are stored: config.json's quantization_config, as data.
//   none       float weights (F32, BF16, F16)
//   fp8_block  {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//               "weight_block_size": [128, 128]}   (fp8_block.h)
//   awq_int4   {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm"}
//              (int4_awq.h)
// Which modules are quantised is read from the tensors themselves (an F8_E4M3 weight, a qweight);
// modules_to_not_convert is what a writer records for other readers (transformers matches its entries as
// substrings of the module names with every number replaced by '*').

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moe/quant/fp8_block.h"

namespace moe::quant {

enum class QuantMethod : uint8_t { none, fp8_block, awq_int4 };

struct QuantScheme {
  QuantMethod method = QuantMethod::none;
  Fp8BlockShape fp8_block;       // fp8_block: weight_block_size [n, k]
  int64_t group_size = 128;      // awq_int4: inputs per scale
  std::vector<std::string> modules_to_not_convert;
};

// "none", "fp8", "int4".
std::string_view quant_method_name(QuantMethod method);

// The scheme of an HF config object (its quantization_config; none when absent or null). Errors name the
// key, the value and what is supported.
QuantScheme parse_quant_scheme(const nlohmann::json& hf_config);

// The quantization_config object that parse_quant_scheme reads back (and transformers understands).
nlohmann::json quant_scheme_json(const QuantScheme& scheme);

}  // namespace moe::quant
