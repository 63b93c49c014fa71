#pragma once
// Choosing the next token from a row of logits: greedy (argmax) or sampling with temperature, top-k and
// top-p (nucleus), applied in that order as transformers' logits warpers do. Sampling is deterministic for
// a given seed: every sequence draws from its own generator, seeded from (seed, stream), so a sequence's
// tokens depend only on the seed, its stream and its own logits, never on which other sequences run.

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace moe::engine {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy; > 0: logits / temperature before the softmax
  int top_k = 0;             // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // keep the smallest most-likely prefix with probability mass >= top_p; 1: all
  uint64_t seed = 0;
};

// Throws moe::Error naming the parameter and its valid range: temperature < 0 (or not finite), top_p
// outside (0, 1], top_k < 0.
void check_sampling_params(const SamplingParams& params);

// The id of the largest logit; ties go to the lower id. NaN logits are an error.
int32_t argmax(std::span<const float> logits);

// The tokens sampling may pick, most likely first (ties: lower id first), with their probabilities
// renormalised over the kept set (they add up to 1). Needs temperature > 0.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> probs;
};
Candidates sampling_candidates(std::span<const float> logits, const SamplingParams& params);

// One sequence's sampler: its parameters and its own generator. Sequences with the same seed and stream
// draw the same numbers; a batch gives each sequence its own stream.
class SequenceSampler {
 public:
  // The generator is seeded from (params.seed, stream). Throws as check_sampling_params.
  SequenceSampler(const SamplingParams& params, uint64_t stream);

  // The next token from the sequence's logits [vocab] F32.
  int32_t next(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 generator_;
};

}  // namespace moe::engine
