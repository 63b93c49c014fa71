#include "weight_reader.h"

#include "quant/linear_weight.h"

namespace moe::model {

bool WeightReader::contains(const std::string& name) const { return quant::has_linear_weight(checkpoint_, name); }

Tensor WeightReader::view(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const {
  MOE_CHECK(contains(name),
            "tensor '{}' not found in {}: the checkpoint does not match its config.json (model_type {})", name,
            checkpoint_.path().string(), model_type_);
  // Names the shard file when the index points at a missing one; dequantises fp8 / int4 weights.
  Tensor t = quant::load_linear_weight(checkpoint_, name, scheme_);
  MOE_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
            "tensor '{}' is {}: weights must be F32, BF16 or F16", name, dtype_name(t.dtype()));
  MOE_CHECK(t.shape() == shape, "tensor '{}' has shape {}, expected {} ({})", name, t.shape_string(),
            shape_to_string(shape), why);
  MOE_CHECK(t.dim() < 2 || t.strides().back() == 1, "tensor '{}' has non-contiguous rows", name);
  return t;
}

Tensor WeightReader::get_f32(const std::string& name, const std::vector<int64_t>& shape,
                             const std::string& why) const {
  const Tensor t = view(name, shape, why);
  return placement_ ? placement_(t, true) : t.to_f32();
}

Tensor WeightReader::get(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const {
  const Tensor t = view(name, shape, why);
  return placement_ ? placement_(t, false) : t;
}

}  // namespace moe::model
