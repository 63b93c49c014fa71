#include <vector>

#include "dot.h"
#include "core/thread_pool.h"
#include "cpu/ops.h"

namespace moe::cpu {

Tensor router_logits(const Tensor& x, const Tensor& gate_weight) {
  const int64_t T = x.size(0), H = x.size(1), E = gate_weight.size(0);
  MOE_CHECK(x.dtype() == DType::F32 && x.is_contiguous(), "router_logits expects contiguous F32 hidden states");
  MOE_CHECK(gate_weight.dim() == 2 && gate_weight.size(1) == H && gate_weight.strides()[1] == 1,
            "gate weight of shape {} does not match hidden size {}", gate_weight.shape_string(), H);
  Tensor logits = Tensor::empty(DType::F32, {T, E});  // [T, E]
  const float* xs = x.data_as<float>();
  float* out = logits.data_as<float>();
  ThreadPool::global().parallel_for(E, 8, [&](int64_t e0, int64_t e1) {
    std::vector<float> row(H);
    for (int64_t e = e0; e < e1; ++e) {
      weight_row_f32(gate_weight, e, row.data());
      for (int64_t t = 0; t < T; ++t) out[t * E + e] = static_cast<float>(dot_f64(xs + t * H, row.data(), H));
    }
  });
  return logits;
}

}  // namespace moe::cpu
