#pragma once
// Reads the decoder's tensors from a checkpoint by HF name, checking each against the shape the config
// implies: errors give the full name, the shape found, the shape expected and the config keys behind it.
// Tensors are zero-copy views of the mapped shards (F32, BF16 or F16; fp8 and int4 linear weights, as the
// config's quantization_config says, are dequantised to BF16 at load: quant/linear_weight.h), or where a
// placement is given what it makes of each (the decoder's ops keep their weights where they run:
// DecoderOps::load_weight).

#include <functional>
#include <string>
#include <vector>

#include "moe/core/checkpoint.h"
#include "moe/quant/quant_scheme.h"

namespace moe::model {

class WeightReader {
 public:
  // What a view becomes (fp32: a norm weight or a bias, wanted in F32); empty: the view itself.
  using Placement = std::function<Tensor(const Tensor& view, bool fp32)>;
  WeightReader(const Checkpoint& checkpoint, std::string model_type, quant::QuantScheme scheme = {},
               Placement placement = {})
      : checkpoint_(checkpoint),
        model_type_(std::move(model_type)),
        scheme_(std::move(scheme)),
        placement_(std::move(placement)) {}

  bool contains(const std::string& name) const;
  // The view (placed); `why` names the config keys the expected shape comes from.
  Tensor get(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const;
  // The same in F32 (norm weights and biases: small vectors, converted once at load).
  Tensor get_f32(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const;
  const Checkpoint& checkpoint() const { return checkpoint_; }

 private:
  Tensor view(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const;

  const Checkpoint& checkpoint_;
  std::string model_type_;
  quant::QuantScheme scheme_;
  Placement placement_;
};

}  // namespace moe::model
