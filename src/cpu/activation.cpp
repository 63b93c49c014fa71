#include <cmath>

#include "cpu/ops.h"

namespace moe::cpu {

void silu_and_mul(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  MOE_CHECK(gate.size() == up.size() && up.size() == out.size(), "silu_and_mul sizes differ: {} {} {}", gate.size(),
            up.size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * double{up[i]});
  }
}

}  // namespace moe::cpu
