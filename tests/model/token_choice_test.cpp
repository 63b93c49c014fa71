// TokenChoice's rule on the host (token_choice.h): greedy ties, top-k and top-p sets, the draw's
// distribution at evenly spaced uniforms, bad fields, and forward_sample against forward on a fixture.
#include "token_choice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "error_of.h"
#include "model_fixture.h"

namespace moe::test {
namespace {

using model::choose_token;
using model::TokenChoice;

const std::vector<float> kLogits = {1.0f, 3.0f, 3.0f, 0.5f, 2.0f, -1.0f};

// How often each token is chosen at n evenly spaced uniforms.
std::map<int32_t, int> counts(TokenChoice c, int n) {
  std::map<int32_t, int> seen;
  for (int i = 0; i < n; ++i) {
    c.uniform = (i + 0.5) / n;
    ++seen[choose_token(kLogits, c)];
  }
  return seen;
}

TEST(TokenChoice, GreedyTakesTheLowerIdOfTies) {
  EXPECT_EQ(choose_token(kLogits, {}), 1);
}

TEST(TokenChoice, DrawsFollowTheSoftmaxOfTheKeptTokens) {
  constexpr int n = 100000;
  const TokenChoice all{.temperature = 0.7};
  double mass = 0;
  for (const float l : kLogits) mass += std::exp((l - 3.0) / 0.7);
  const std::map<int32_t, int> seen = counts(all, n);
  for (int32_t id = 0; id < 6; ++id)
    EXPECT_NEAR(seen.count(id) ? seen.at(id) : 0, n * std::exp((kLogits[id] - 3.0) / 0.7) / mass, 2.0) << id;
  // top-k 2 keeps the two 3.0s; top-k 1 keeps them too (ties at the boundary stay).
  for (const int k : {1, 2}) {
    const std::map<int32_t, int> two = counts({.temperature = 0.7, .top_k = k}, n);
    EXPECT_EQ(two.size(), 2u) << k;
    EXPECT_NEAR(two.at(1), n / 2, 1) << k;
  }
  // top-p: the 3.0s weigh 2 / mass of the whole; just above that share takes in the 2.0 as well.
  const double share = 2.0 / mass;
  EXPECT_EQ(counts({.temperature = 0.7, .top_p = share * 0.99}, n).size(), 2u);
  const std::map<int32_t, int> three = counts({.temperature = 0.7, .top_p = share * 1.01}, n);
  EXPECT_EQ(three.size(), 3u);
  EXPECT_TRUE(three.count(4));
}

TEST(TokenChoice, BadFieldsAreErrors) {
  EXPECT_NE(error_of([] { choose_token(kLogits, {.temperature = -1}); }).find("temperature"),
            std::string::npos);
  EXPECT_NE(error_of([] { choose_token(kLogits, {.top_k = -2}); }).find("top_k"), std::string::npos);
  EXPECT_NE(error_of([] { choose_token(kLogits, {.top_p = 0}); }).find("top_p"), std::string::npos);
  EXPECT_NE(error_of([] { choose_token(kLogits, {.uniform = 1.0}); }).find("uniform"), std::string::npos);
  const std::vector<float> nan = {0.0f, NAN};
  EXPECT_NE(error_of([&] { choose_token(nan, {}); }).find("NaN"), std::string::npos);
}

TEST(TokenChoice, ForwardSampleChoosesFromForwardsLogits) {
  const auto lm = model::CausalLM::load(fixture_dir("qwen3_moe"));
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {4, 2}};
  auto a = lm->new_cache(2, 8), b = lm->new_cache(2, 8);
  const Tensor logits = lm->forward(prompts, *a, true);  // [2, V]
  const std::vector<TokenChoice> choices = {{},
                                            {.temperature = 0.8, .top_k = 20, .top_p = 0.9, .uniform = 0.37}};
  const std::vector<int32_t> ids = lm->forward_sample(prompts, *b, choices);
  const int64_t V = logits.size(1);
  ASSERT_EQ(ids.size(), 2u);
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_EQ(ids[r], choose_token({logits.data_as<float>() + r * V, static_cast<size_t>(V)}, choices[r]))
        << r;
  EXPECT_EQ(ids[0], argmax(logits.data_as<float>(), V));
  EXPECT_NE(
      error_of([&] { lm->forward_sample(prompts, *b, std::vector<TokenChoice>(1)); }).find("2 sequences"),
      std::string::npos);
}

}  // namespace
}  // namespace moe::test
