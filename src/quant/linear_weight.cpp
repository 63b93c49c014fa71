#include "quant/linear_weight.h"

#include "quant/int4_awq.h"

namespace moe::quant {

namespace {

constexpr std::string_view kWeightSuffix = ".weight";

bool ends_with_weight(const std::string& name) { return name.ends_with(kWeightSuffix); }

// "<module>.weight" -> "<module>"; empty for names without the suffix (fused tensors).
std::string awq_module(const std::string& name) {
  return ends_with_weight(name) ? name.substr(0, name.size() - kWeightSuffix.size()) : std::string();
}

}  // namespace

std::string fp8_scale_name(const Checkpoint& checkpoint, const std::string& name) {
  if (ends_with_weight(name)) return name + "_scale_inv";
  // NOTE: transformers 5 names a fused expert tensor's scales "<name>_scale_inv"; its early FP8 experts
  // wrote "<name>_scales_inv", looked up first.
  const std::string plural = name + "_scales_inv";
  return checkpoint.contains(plural) ? plural : name + "_scale_inv";
}

bool has_linear_weight(const Checkpoint& checkpoint, const std::string& name) {
  if (checkpoint.contains(name)) return true;
  const std::string module = awq_module(name);
  return !module.empty() && checkpoint.contains(module + ".qweight");
}

Tensor load_linear_weight(const Checkpoint& checkpoint, const std::string& name, const QuantScheme& scheme) {
  const std::string module = awq_module(name);
  if (!checkpoint.contains(name) && !module.empty() && checkpoint.contains(module + ".qweight")) {
    MOE_CHECK(scheme.method == QuantMethod::awq_int4, "tensor '{}.qweight' is an int4 (AWQ) weight, but config.json's "
              "quantization_config does not say awq (quant_method 'awq', bits 4, group_size): add it or use float "
              "weights", module);
    for (const char* part : {".qzeros", ".scales"})
      MOE_CHECK(checkpoint.contains(module + part), "tensor '{}{}' not found in {}: an AWQ weight needs qweight, qzeros "
                "and scales", module, part, checkpoint.path().string());
    const AwqInt4Weight w{.qweight = checkpoint.get(module + ".qweight"), .qzeros = checkpoint.get(module + ".qzeros"),
                          .scales = checkpoint.get(module + ".scales")};
    return dequantize_awq_int4(w, scheme.group_size, DType::BF16, module);
  }
  Tensor t = checkpoint.get(name);  // the "not found" error with its hints
  if (t.dtype() != DType::F8_E4M3) return t;
  MOE_CHECK(scheme.method == QuantMethod::fp8_block, "tensor '{}' is F8_E4M3, but config.json's quantization_config "
            "does not say fp8 (quant_method 'fp8', weight_block_size [128, 128]): add it or use float weights", name);
  const std::string scale = fp8_scale_name(checkpoint, name);
  MOE_CHECK(checkpoint.contains(scale), "tensor '{}' is F8_E4M3 but its block scales '{}' are not in {}", name, scale,
            checkpoint.path().string());
  return dequantize_fp8_block(t, checkpoint.get(scale), scheme.fp8_block, DType::BF16, name);
}

}  // namespace moe::quant
