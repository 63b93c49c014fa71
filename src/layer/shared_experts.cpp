#include "layer/shared_experts.h"

#include <cmath>

#include "cpu/ops.h"

namespace moe {

void add_shared_experts_reference(const MoeConfig& config, const MoeWeights& weights, const Tensor& x, Tensor& y) {
  if (config.shared == SharedExpertKind::none) return;
  const int64_t T = x.size(0), H = x.size(1);
  const Tensor shared = cpu::swiglu_mlp(x, weights.shared);  // [T, H]
  Tensor gate_logit;                                         // [T, 1]
  if (config.shared == SharedExpertKind::sigmoid_gated) gate_logit = cpu::router_logits(x, weights.shared_gate);
  float* out = y.data_as<float>();
  const float* s = shared.data_as<float>();
  for (int64_t t = 0; t < T; ++t) {
    const double gate = gate_logit.defined() ? 1.0 / (1.0 + std::exp(-double{gate_logit.data_as<float>()[t]})) : 1.0;
    for (int64_t h = 0; h < H; ++h) out[t * H + h] = static_cast<float>(out[t * H + h] + gate * s[t * H + h]);
  }
}

}  // namespace moe
