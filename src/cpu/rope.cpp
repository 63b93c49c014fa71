#include "cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "moe/core/check.h"

namespace moe::cpu {

void rope_head(const RopeTable& table, float* x, int64_t pos) {
  const auto half = static_cast<int64_t>(table.inv_freq.size());
  const float scale = table.attention_factor;
  float rotated[512];
  MOE_CHECK(2 * half <= 512, "rotary dimension {} exceeds 512", 2 * half);
  for (int64_t i = 0; i < half; ++i) {
    // The angle in fp32 (inv_freq @ position_ids), cos/sin scaled by the attention factor.
    const float angle = table.inv_freq[i] * static_cast<float>(pos);
    const float c = static_cast<float>(std::cos(double{angle})) * scale;
    const float s = static_cast<float>(std::sin(double{angle})) * scale;
    switch (table.pairing) {
      case RopePairing::halves: {
        const float a = x[i], b = x[i + half];
        rotated[i] = a * c - b * s;
        rotated[i + half] = b * c + a * s;
        break;
      }
      case RopePairing::pairs: {
        const float a = x[2 * i], b = x[2 * i + 1];
        rotated[2 * i] = a * c - b * s;
        rotated[2 * i + 1] = a * s + b * c;
        break;
      }
      case RopePairing::pairs_to_halves: {
        const float a = x[2 * i], b = x[2 * i + 1];
        rotated[i] = a * c - b * s;
        rotated[i + half] = b * c + a * s;
        break;
      }
    }
  }
  std::copy(rotated, rotated + 2 * half, x);
}

void rope(const RopeTable& table, Tensor& x, int64_t heads, int64_t offset, std::span<const int64_t> positions) {
  const int64_t T = x.size(0), dim = 2 * static_cast<int64_t>(table.inv_freq.size());
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous() && heads > 0 && x.size(1) % heads == 0 &&
                offset + dim <= x.size(1) / heads && static_cast<int64_t>(positions.size()) == T,
            "rope: rows {} do not hold {} heads with {} rotary dimensions from column {} ({} positions)",
            x.shape_string(), heads, dim, offset, positions.size());
  const int64_t stride = x.size(1) / heads;
  float* p = x.data_as<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h) rope_head(table, p + (t * heads + h) * stride + offset, positions[t]);
}

}  // namespace moe::cpu
