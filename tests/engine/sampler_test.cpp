// The sampler: greedy ties, the exact top-k / top-p masks, temperature, and sampled frequencies on small
// vocabularies against the softmax they should follow (fixed seeds; each count must lie within 5 standard
// deviations of its binomial mean, so a correct sampler passes with any seed).
#include "moe/engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "moe/core/check.h"

namespace moe::engine {
namespace {

// Logits whose softmax is `probs` (up to rounding).
std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// softmax(logits / temperature) in double.
std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  std::vector<double> p;
  for (float l : logits) sum += p.emplace_back(std::exp((l - max) / temperature));
  for (double& x : p) x /= sum;
  return p;
}

// Draws n tokens from stream 0 and checks every token's count against n * expected[i] within 5 sigma.
void expect_frequencies(const std::vector<float>& logits, const SamplingParams& params,
                        const std::vector<double>& expected, int n = 40000) {
  SequenceSampler sampler(params, 0);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++counts.at(sampler.next(logits));
  for (size_t i = 0; i < logits.size(); ++i) {
    const double mean = n * expected[i];
    const double sigma = std::sqrt(n * expected[i] * (1.0 - expected[i]));
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is masked but was drawn";
    } else {
      EXPECT_NEAR(counts[i], mean, 5.0 * sigma) << "token " << i << ", expected probability " << expected[i];
    }
  }
}

std::string error_of(const SamplingParams& params) {
  try {
    check_sampling_params(params);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Sampler, ArgmaxTiesGoToTheLowerId) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(argmax(logits), 1);
  const std::vector<float> single = {-3.0f};
  EXPECT_EQ(argmax(single), 0);
  const std::vector<float> nan = {0.0f, std::nanf("")};
  EXPECT_THROW(argmax(nan), Error);
  EXPECT_THROW(argmax(std::span<const float>{}), Error);
}

TEST(Sampler, TemperatureZeroIsGreedyAndIgnoresTheFilters) {
  const std::vector<float> logits = {0.1f, 0.7f, 0.7f, 0.2f};
  SequenceSampler stream0({.temperature = 0.0, .top_k = 3, .top_p = 0.5, .seed = 7}, 0);
  SequenceSampler stream1({.temperature = 0.0, .top_k = 3, .top_p = 0.5, .seed = 7}, 1);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(stream0.next(logits), 1);
    EXPECT_EQ(stream1.next(logits), 1);
  }
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  expect_frequencies(log_of(probs), {.temperature = 1.0, .seed = 1}, probs);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f};
  for (double t : {0.5, 2.0}) {
    SCOPED_TRACE("temperature " + std::to_string(t));
    const auto expected = softmax(logits, t);
    const Candidates c = sampling_candidates(logits, {.temperature = t});
    ASSERT_EQ(c.ids.size(), logits.size());
    for (size_t i = 0; i < c.ids.size(); ++i) EXPECT_NEAR(c.probs[i], expected[c.ids[i]], 1e-12);
    expect_frequencies(logits, {.temperature = t, .seed = 2}, expected);
  }
  // A huge temperature is uniform; a tiny one puts all the mass on the argmax (no NaN from the division).
  const Candidates flat = sampling_candidates(logits, {.temperature = 1e9});
  for (double p : flat.probs) EXPECT_NEAR(p, 0.2, 1e-8);
  for (double t : {1e-3, 1e-8, 1e-30}) {
    const Candidates sharp = sampling_candidates(logits, {.temperature = t});
    EXPECT_EQ(sharp.ids.front(), 2);
    EXPECT_EQ(sharp.probs.front(), 1.0);
    SequenceSampler sampler({.temperature = t, .seed = 3}, 0);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.next(logits), 2);
  }
  // Two equal maxima share the mass as T -> 0.
  const std::vector<float> tied = {1.0f, 3.0f, 0.0f, 3.0f};
  const Candidates split = sampling_candidates(tied, {.temperature = 1e-6});
  EXPECT_EQ(split.ids[0], 1);
  EXPECT_EQ(split.ids[1], 3);
  EXPECT_DOUBLE_EQ(split.probs[0], 0.5);
  EXPECT_DOUBLE_EQ(split.probs[1], 0.5);
}

TEST(Sampler, TopKKeepsExactlyTheKMostLikely) {
  const std::vector<double> probs = {0.05, 0.3, 0.1, 0.35, 0.2};
  const auto logits = log_of(probs);
  const Candidates c = sampling_candidates(logits, {.temperature = 1.0, .top_k = 2});
  EXPECT_EQ(c.ids, (std::vector<int32_t>{3, 1}));
  EXPECT_NEAR(c.probs[0], 0.35 / 0.65, 1e-7);
  EXPECT_NEAR(c.probs[1], 0.3 / 0.65, 1e-7);
  expect_frequencies(logits, {.temperature = 1.0, .top_k = 2, .seed = 4}, {0, 0.3 / 0.65, 0, 0.35 / 0.65, 0});
  // Ties at the boundary go to the lower id; k >= vocab keeps everything.
  const std::vector<float> tied = {1.0f, 3.0f, 3.0f, 3.0f};
  EXPECT_EQ(sampling_candidates(tied, {.temperature = 1.0, .top_k = 2}).ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(sampling_candidates(tied, {.temperature = 1.0, .top_k = 9}).ids.size(), 4u);
  EXPECT_EQ(sampling_candidates(tied, {.temperature = 1.0, .top_k = 1}).ids, (std::vector<int32_t>{1}));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Shuffled so that the sort matters: sorted masses are 0.4, 0.7, 0.9, 1.0.
  const std::vector<double> probs = {0.2, 0.4, 0.1, 0.3};
  const auto logits = log_of(probs);
  const auto ids = [&](double p) { return sampling_candidates(logits, {.temperature = 1.0, .top_p = p}).ids; };
  EXPECT_EQ(ids(1e-9), (std::vector<int32_t>{1}));
  EXPECT_EQ(ids(0.35), (std::vector<int32_t>{1}));
  EXPECT_EQ(ids(0.45), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(ids(0.65), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(ids(0.75), (std::vector<int32_t>{1, 3, 0}));
  EXPECT_EQ(ids(0.95), (std::vector<int32_t>{1, 3, 0, 2}));
  EXPECT_EQ(ids(1.0), (std::vector<int32_t>{1, 3, 0, 2}));
  const Candidates c = sampling_candidates(logits, {.temperature = 1.0, .top_p = 0.75});
  EXPECT_NEAR(c.probs[0], 0.4 / 0.9, 1e-7);
  EXPECT_NEAR(c.probs[2], 0.2 / 0.9, 1e-7);
  expect_frequencies(logits, {.temperature = 1.0, .top_p = 0.75, .seed = 5}, {0.2 / 0.9, 0.4 / 0.9, 0, 0.3 / 0.9});
}

TEST(Sampler, TopPActsOnTheTopKRenormalisedDistribution) {
  // Top-2 of {0.4, 0.3, 0.2, 0.1} renormalises to {4/7, 3/7}: top_p 0.5 then keeps one token, while on
  // the unfiltered distribution it keeps two (0.4 < 0.5).
  const auto logits = log_of({0.4, 0.3, 0.2, 0.1});
  EXPECT_EQ(sampling_candidates(logits, {.temperature = 1.0, .top_k = 2, .top_p = 0.5}).ids,
            (std::vector<int32_t>{0}));
  EXPECT_EQ(sampling_candidates(logits, {.temperature = 1.0, .top_p = 0.5}).ids, (std::vector<int32_t>{0, 1}));
  // Temperature comes first: at T = 0.25 the top token holds 0.4^4 / sum p^4 = 0.74 of the mass.
  EXPECT_EQ(sampling_candidates(logits, {.temperature = 0.25, .top_p = 0.7}).ids, (std::vector<int32_t>{0}));
}

TEST(Sampler, MinusInfinityLogitsAreNeverDrawn) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-inf, 0.0f, -inf, 0.0f};
  expect_frequencies(logits, {.temperature = 1.0, .seed = 6}, {0, 0.5, 0, 0.5}, 4000);
  const std::vector<float> all_masked = {-inf, -inf};
  SequenceSampler sampler({.temperature = 1.0}, 0);
  EXPECT_THROW(sampler.next(all_masked), Error);
}

TEST(Sampler, SeedsReproduceAndStreamsAreIndependent) {
  const auto logits = log_of({0.25, 0.25, 0.25, 0.25});
  const SamplingParams params{.temperature = 1.0, .seed = 42};
  const auto draw = [&](SequenceSampler& s, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(s.next(logits));
    return out;
  };
  SequenceSampler a0(params, 0), a1(params, 1), b0(params, 0), other({.temperature = 1.0, .seed = 43}, 0);
  const auto first = draw(a0, 100);
  EXPECT_EQ(first, draw(b0, 100));
  EXPECT_NE(first, draw(other, 100));
  // Stream 1's draws do not depend on whether stream 0 drew in between, and differ from stream 0's.
  SequenceSampler c0(params, 0), c1(params, 1);
  std::vector<int32_t> interleaved;
  for (int i = 0; i < 100; ++i) {
    interleaved.push_back(c1.next(logits));
    c0.next(logits);
  }
  EXPECT_EQ(interleaved, draw(a1, 100));
  EXPECT_NE(interleaved, first);
}

TEST(Sampler, BadParametersAreRejectedWithTheirRange) {
  EXPECT_NE(error_of({.temperature = -0.1}).find("temperature must be >= 0"), std::string::npos);
  EXPECT_NE(error_of({.temperature = std::nan("")}).find("temperature"), std::string::npos);
  EXPECT_NE(error_of({.temperature = 1.0, .top_p = 0.0}).find("top_p must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_of({.temperature = 1.0, .top_p = 1.5}).find("top_p must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_of({.temperature = 1.0, .top_p = std::nan("")}).find("top_p"), std::string::npos);
  EXPECT_NE(error_of({.temperature = 1.0, .top_k = -1}).find("top_k must be >= 0"), std::string::npos);
  EXPECT_EQ(error_of({.temperature = 0.7, .top_k = 40, .top_p = 0.9}), "");
  EXPECT_THROW(SequenceSampler({.temperature = -1.0}, 0), Error);
}

}  // namespace
}  // namespace moe::engine
