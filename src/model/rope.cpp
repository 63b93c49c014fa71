#include "rope.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "moe/core/check.h"

namespace moe::model {

namespace {

// base ** (2i / dim) in fp32, as torch evaluates `base ** (torch.arange(0, dim, 2).float() / dim)`.
float pos_freq(double base, int64_t i, int64_t dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
  return static_cast<float>(std::pow(static_cast<double>(static_cast<float>(base)), double{exponent}));
}

// _compute_yarn_parameters: blend interpolated (÷ factor) and original frequencies with a linear ramp
// over the dimensions between the beta_fast and beta_slow rotation counts.
std::vector<float> yarn_inv_freq(const RopeConfig& c) {
  const int64_t half = c.dim / 2;
  const double base = c.theta, dim = double(c.dim);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(double(c.original_max_position_embeddings) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // as transformers: avoid a zero-width ramp
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    const float p = pos_freq(base, i, c.dim);
    const float extrapolation = 1.0f / p;
    const float interpolation = 1.0f / (static_cast<float>(c.factor) * p);
    const float ramp = std::clamp(static_cast<float>((float(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

}  // namespace

Rope::Rope(const RopeConfig& config) : config_(config) {
  MOE_CHECK(config.dim > 0 && config.dim % 2 == 0, "the rotary dimension must be positive and even, got {}",
            config.dim);
  // NOTE: checked here, before the tables are sized by it (a forged head_dim of 2^40 must not allocate).
  MOE_CHECK(config.dim <= 512, "rotary dimension {} exceeds 512 (head_dim, or qk_rope_head_dim for MLA)", config.dim);
  auto float_range = [](double v) { return std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(); };
  MOE_CHECK(float_range(config.theta) && config.theta > 0 && float_range(config.factor) &&
                float_range(config.attention_factor),
            "rope parameters out of range: rope_theta {} (must be positive), factor {}, attention factor {}",
            config.theta, config.factor, config.attention_factor);
  if (config.type == RopeType::yarn) {
    MOE_CHECK(config.factor > 0 && config.original_max_position_embeddings > 0,
              "yarn rope needs factor > 0 and original_max_position_embeddings > 0 (got {}, {})", config.factor,
              config.original_max_position_embeddings);
    inv_freq_ = yarn_inv_freq(config);
  } else {
    for (int64_t i = 0; i < config.dim / 2; ++i) inv_freq_.push_back(1.0f / pos_freq(config.theta, i, config.dim));
  }
}

cpu::RopeTable Rope::cpu_table() const {
  const auto pairing = [&] {
    switch (config_.layout) {
      case RopeLayout::pairs:
        return cpu::RopePairing::pairs;
      case RopeLayout::pairs_to_halves:
        return cpu::RopePairing::pairs_to_halves;
      case RopeLayout::halves:
        break;
    }
    return cpu::RopePairing::halves;
  }();
  return {.inv_freq = inv_freq_, .attention_factor = static_cast<float>(config_.attention_factor), .pairing = pairing};
}

}  // namespace moe::model
