#include "token_choice.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "moe/core/check.h"

namespace moe::model {

void check_token_choice(const TokenChoice& c) {
  MOE_CHECK(std::isfinite(c.temperature) && c.temperature >= 0.0,
            "temperature must be >= 0 (0 is greedy), got {}", c.temperature);
  MOE_CHECK(c.top_k >= 0, "top_k must be >= 0 (0 keeps every token), got {}", c.top_k);
  MOE_CHECK(c.top_p > 0.0 && c.top_p <= 1.0, "top_p must be in (0, 1] (1 keeps every token), got {}",
            c.top_p);
  MOE_CHECK(c.uniform >= 0.0 && c.uniform < 1.0, "a token choice's uniform draw must be in [0, 1), got {}",
            c.uniform);
}

int32_t choose_token(std::span<const float> logits, const TokenChoice& c) {
  check_token_choice(c);
  MOE_CHECK(!logits.empty(), "cannot choose a token from an empty row of logits");
  for (size_t i = 0; i < logits.size(); ++i)
    MOE_CHECK(!std::isnan(logits[i]), "logit {} is NaN: the model's output is broken", i);
  const auto V = static_cast<int64_t>(logits.size());
  const int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();  // ties: lower id
  if (c.temperature == 0.0) return static_cast<int32_t>(best);
  const float max_logit = logits[best];
  // NOTE: the temperature as the kernel gets it (fp32), the weights in double as it computes them.
  const double temperature = static_cast<float>(c.temperature);
  const auto weight = [&](int64_t i) {
    return std::exp((double(logits[i]) - double(max_logit)) / temperature);
  };
  float threshold = -INFINITY;  // kept: logits >= threshold
  if (c.top_k > 0 && c.top_k < V) {
    std::vector<float> sorted(logits.begin(), logits.end());
    std::nth_element(sorted.begin(), sorted.begin() + (c.top_k - 1), sorted.end(), std::greater<>());
    threshold = sorted[c.top_k - 1];
  }
  if (c.top_p < 1.0) {
    std::vector<int64_t> kept;
    double mass = 0;
    for (int64_t i = 0; i < V; ++i)
      if (logits[i] >= threshold) kept.push_back(i), mass += weight(i);
    std::sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    // The smallest value whose tokens at or above it weigh at least top_p of the kept mass.
    const double target = c.top_p * mass;
    double cum = 0;
    for (size_t n = 0; n < kept.size();) {
      const float value = logits[kept[n]];
      for (; n < kept.size() && logits[kept[n]] == value; ++n) cum += weight(kept[n]);
      if (cum >= target) {
        threshold = value;
        break;
      }
    }
  }
  double mass = 0;
  for (int64_t i = 0; i < V; ++i)
    if (logits[i] >= threshold) mass += weight(i);
  const double r = c.uniform * mass;
  double cum = 0;
  int64_t last = best;
  for (int64_t i = 0; i < V; ++i) {
    if (logits[i] < threshold) continue;
    cum += weight(i);
    last = i;
    if (r < cum) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);  // only through rounding at the very top of the range
}

}  // namespace moe::model
