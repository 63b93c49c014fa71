#include "moe/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moe/core/check.h"

namespace moe::engine {

namespace {

void check_logits(std::span<const float> logits) {
  MOE_CHECK(!logits.empty(), "cannot choose a token from an empty row of logits");
  for (size_t i = 0; i < logits.size(); ++i)
    MOE_CHECK(!std::isnan(logits[i]), "logit {} is NaN: the model's output is broken", i);
}

// Kept tokens and their unnormalised weights exp((l - max) / T). With `sorted`, most likely first (ties:
// lower id first); without (no top-k or top-p, where the order does not matter) in id order, which skips
// a sort of the whole vocabulary at every step.
struct Kept {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  double mass = 0.0;  // sum of weights, added in the order above
};

Kept keep(std::span<const float> logits, const SamplingParams& params, bool sorted) {
  check_logits(logits);
  MOE_CHECK(params.temperature > 0.0, "sampling needs a temperature > 0 (0 means greedy: use argmax)");
  const auto vocab = static_cast<int64_t>(logits.size());
  const bool filter = (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.0;
  Kept kept;
  kept.ids.resize(vocab);
  std::iota(kept.ids.begin(), kept.ids.end(), 0);
  const auto more_likely = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (params.top_k > 0 && params.top_k < vocab) {
    std::partial_sort(kept.ids.begin(), kept.ids.begin() + params.top_k, kept.ids.end(), more_likely);
    kept.ids.resize(params.top_k);
  } else if (sorted || filter) {
    std::sort(kept.ids.begin(), kept.ids.end(), more_likely);
  }
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  MOE_CHECK(std::isfinite(max_logit), "the largest logit is {}: the model's output is broken", max_logit);
  kept.weights.resize(kept.ids.size());
  for (size_t i = 0; i < kept.ids.size(); ++i) {
    // NOTE: (l - max) <= 0, so exp never overflows; as T -> 0 every non-maximal weight underflows to 0.
    kept.weights[i] = std::exp((static_cast<double>(logits[kept.ids[i]]) - max_logit) / params.temperature);
    kept.mass += kept.weights[i];
  }
  if (params.top_p < 1.0) {
    // The smallest prefix with mass >= top_p of the (top-k renormalised) distribution; the first token has
    // weight 1, so at least one is always kept.
    const double target = params.top_p * kept.mass;
    double cum = 0.0;
    size_t n = 0;
    while (n < kept.ids.size()) {
      cum += kept.weights[n++];
      if (cum >= target) break;
    }
    kept.ids.resize(n);
    kept.weights.resize(n);
    kept.mass = cum;
  }
  return kept;
}

// A uniform double in [0, 1) from the top 53 bits: the same on every standard library (unlike
// std::uniform_real_distribution, whose algorithm is unspecified).
double uniform01(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1p-53; }

// seed_seq's mixing is specified by the standard, so the streams are the same everywhere.
std::mt19937_64 seeded_generator(uint64_t seed, uint64_t stream) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(stream),
                    static_cast<uint32_t>(stream >> 32)};
  return std::mt19937_64(seq);
}

}  // namespace

void check_sampling_params(const SamplingParams& params) {
  MOE_CHECK(std::isfinite(params.temperature) && params.temperature >= 0.0,
            "temperature must be >= 0 (0 is greedy), got {}", params.temperature);
  MOE_CHECK(params.top_p > 0.0 && params.top_p <= 1.0, "top_p must be in (0, 1] (1 keeps every token), got {}",
            params.top_p);
  MOE_CHECK(params.top_k >= 0, "top_k must be >= 0 (0 keeps every token), got {}", params.top_k);
}

int32_t argmax(std::span<const float> logits) {
  check_logits(logits);
  // max_element returns the first of equal maxima: ties go to the lower id.
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Candidates sampling_candidates(std::span<const float> logits, const SamplingParams& params) {
  check_sampling_params(params);
  Kept kept = keep(logits, params, /*sorted=*/true);
  Candidates c{.ids = std::move(kept.ids), .probs = std::move(kept.weights)};
  for (double& p : c.probs) p /= kept.mass;
  return c;
}

SequenceSampler::SequenceSampler(const SamplingParams& params, uint64_t stream)
    : params_(params), generator_(seeded_generator(params.seed, stream)) {
  check_sampling_params(params);
}

int32_t SequenceSampler::next(std::span<const float> logits) {
  if (params_.temperature == 0.0) return argmax(logits);
  const Kept kept = keep(logits, params_, /*sorted=*/false);
  const double r = uniform01(generator_) * kept.mass;
  double cum = 0.0;
  for (size_t i = 0; i < kept.ids.size(); ++i) {
    cum += kept.weights[i];
    if (r < cum) return kept.ids[i];
  }
  // Only reachable through rounding at the very top of the range: the last token with any weight.
  for (size_t i = kept.ids.size(); i-- > 0;)
    if (kept.weights[i] > 0.0) return kept.ids[i];
  return kept.ids.front();
}

}  // namespace moe::engine
