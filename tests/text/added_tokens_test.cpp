// The added tokens alone: how text is cut at them (leftmost-longest, lstrip, rstrip, single_word), before and
// after normalisation.
#include "added_tokens.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace moe::text {
namespace {

const JsonSource kSource{"t.json"};

struct Added {
  Vocabulary vocab{kSource, 16};
  Normalizer normalizer;
  AddedTokens tokens;

  explicit Added(const char* list, const char* normalizer_json = "null") {
    normalizer.parse(Json::parse(normalizer_json), kSource);
    tokens.parse(Json::parse(list), kSource, vocab, normalizer);
  }
};

// "text" for a text segment, "#id" for a token.
std::vector<std::string> shown(const std::vector<Segment>& segments) {
  std::vector<std::string> out;
  for (const Segment& s : segments) out.push_back(s.id >= 0 ? fmt::format("#{}", s.id) : s.text);
  return out;
}

using Shown = std::vector<std::string>;

TEST(AddedTokens, TheLongestTokenAtTheLeftmostPositionWins) {
  const Added added(
      R"([{"id": 1, "content": "<a>"}, {"id": 2, "content": "<a><b>"}, {"id": 3, "content": "<b>"}])");
  EXPECT_EQ(shown(added.tokens.split_raw("x<a><b>y<b><a>", true)), (Shown{"x", "#2", "y", "#3", "#1"}));
  EXPECT_EQ(shown(added.tokens.split_raw("plain", true)), Shown{"plain"});
  EXPECT_EQ(added.vocab.token_of(2), "<a><b>");
}

TEST(AddedTokens, OnlyTheTextAtTheInputsStartIsAtStart) {
  const Added added(R"([{"id": 1, "content": "<a>"}])");
  const auto segments = added.tokens.split_raw("b<a>c", true);
  ASSERT_EQ(shown(segments), (Shown{"b", "#1", "c"}));
  EXPECT_TRUE(segments[0].at_start);
  EXPECT_FALSE(segments[2].at_start);
  EXPECT_FALSE(added.tokens.split_raw("b<a>c", false)[0].at_start);
}

TEST(AddedTokens, StripAndSingleWord) {
  const Added lstrip(R"([{"id": 1, "content": "<m>", "lstrip": true}])");
  EXPECT_EQ(shown(lstrip.tokens.split_raw("a \t<m> b", true)), (Shown{"a", "#1", " b"}));
  const Added rstrip(R"([{"id": 1, "content": "<m>", "rstrip": true}])");
  EXPECT_EQ(shown(rstrip.tokens.split_raw("a <m>\n b", true)), (Shown{"a ", "#1", "b"}));
  const Added word(R"([{"id": 1, "content": "ab", "single_word": true}])");
  EXPECT_EQ(shown(word.tokens.split_raw("ab cab ab_ ab", true)), (Shown{"#1", " cab ab_ ", "#1"}));
}

TEST(AddedTokens, NormalizedTokensAreMatchedInTheNormalisedText) {
  const Added added(
      R"([{"id": 1, "content": "x", "normalized": true}, {"id": 2, "content": "z", "special": true}])",
      R"({"type": "Replace", "pattern": {"String": "x"}, "content": "y"})");
  EXPECT_EQ(shown(added.tokens.split_raw("axz", true)), (Shown{"ax", "#2"}));
  EXPECT_EQ(shown(added.tokens.split_normalized("ay", true)), (Shown{"a", "#1"}));
  EXPECT_FALSE(added.vocab.is_special(1));
  EXPECT_TRUE(added.vocab.is_special(2));
}

}  // namespace
}  // namespace moe::text
