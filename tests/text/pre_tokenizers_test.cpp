// The pre-tokenizers alone: the split behaviours on the library's documented example, and each step's pieces.
#include "pre_tokenizers.h"

#include <gtest/gtest.h>

#include "moe/core/check.h"

namespace moe::text {
namespace {

const JsonSource kSource{"t.json"};

std::vector<std::string> texts(const std::vector<Piece>& pieces) {
  std::vector<std::string> out;
  for (const Piece& p : pieces) out.push_back(p.text);
  return out;
}

std::vector<Piece> pre_tokenize(const char* json, const std::string& text, bool at_start = true) {
  PreTokenizer pre;
  pre.parse(Json::parse(json), kSource);
  return pre.pre_tokenize({text, at_start});
}

using Pieces = std::vector<std::string>;

TEST(SplitBy, EachBehaviourAsTheLibraryDocumentsIt) {
  // The example of the library's SplitDelimiterBehavior: "the-final--countdown" split on "-".
  const std::string text = "the-final--countdown";
  const auto dashes = Pattern{.literal = "-", .regex = nullptr}.find_all(text);
  EXPECT_EQ(split_by(text, dashes, SplitBehavior::kRemoved, false), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split_by(text, dashes, SplitBehavior::kIsolated, false),
            (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split_by(text, dashes, SplitBehavior::kMergedWithPrevious, false),
            (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split_by(text, dashes, SplitBehavior::kMergedWithNext, false),
            (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split_by(text, dashes, SplitBehavior::kContiguous, false),
            (Pieces{"the", "-", "final", "--", "countdown"}));
  // Inverted, the words are the delimiters.
  EXPECT_EQ(split_by(text, dashes, SplitBehavior::kRemoved, true), (Pieces{"-", "-", "-"}));
  EXPECT_EQ(split_by("", {}, SplitBehavior::kIsolated, false), Pieces{});
}

TEST(PreTokenizer, ByteLevelSplitsLikeGpt2AndMapsTheBytes) {
  const char* json = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  EXPECT_EQ(texts(pre_tokenize(json, "Hello world")), (Pieces{"Hello", "\u0120world"}));
  // A run of spaces gives its last space to the word after it; "'s" is a piece of its own.
  EXPECT_EQ(texts(pre_tokenize(json, "a  b's")), (Pieces{"a", "\u0120", "\u0120b", "'s"}));
  EXPECT_EQ(texts(pre_tokenize(R"({"type": "ByteLevel", "add_prefix_space": true})", "Hi")),
            Pieces{"\u0120Hi"});
  EXPECT_EQ(texts(pre_tokenize(R"({"type": "ByteLevel", "use_regex": false})", "a b\n")),
            Pieces{"a\u0120b\u010a"});
}

TEST(PreTokenizer, MetaspacePrependsByScheme) {
  const char* first =
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})";
  EXPECT_EQ(texts(pre_tokenize(first, "Hello world", true)), (Pieces{"▁Hello", "▁world"}));
  EXPECT_EQ(texts(pre_tokenize(first, "Hello world", false)), (Pieces{"Hello", "▁world"}));
  const char* always =
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false})";
  EXPECT_EQ(texts(pre_tokenize(always, "Hello world", false)), Pieces{"▁Hello▁world"});
  const char* never = R"({"type": "Metaspace", "add_prefix_space": false})";
  EXPECT_EQ(texts(pre_tokenize(never, " a", true)), (Pieces{"▁a"}));
}

TEST(PreTokenizer, DigitsAndSplit) {
  EXPECT_EQ(texts(pre_tokenize(R"({"type": "Digits", "individual_digits": true})", "a123b")),
            (Pieces{"a", "1", "2", "3", "b"}));
  EXPECT_EQ(texts(pre_tokenize(R"({"type": "Digits", "individual_digits": false})", "a123b")),
            (Pieces{"a", "123", "b"}));
  const char* split =
      R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": false})";
  EXPECT_EQ(texts(pre_tokenize(split, " x  y\nz ")), (Pieces{"x", "y", "z"}));
}

TEST(PreTokenizer, ASequenceFeedsEachStepThePiecesOfTheOneBefore) {
  // Only the first piece of the input stays "at start", so Metaspace's "first" scheme prefixes it alone.
  const char* json = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed"},
      {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}]})";
  const auto pieces = pre_tokenize(json, "a b c");
  EXPECT_EQ(texts(pieces), (Pieces{"▁a", "b", "c"}));
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_TRUE(pieces[0].at_start);
  EXPECT_FALSE(pieces[1].at_start);
}

TEST(PreTokenizer, UnsupportedStepsAreErrorsNamingThem) {
  PreTokenizer pre;
  try {
    pre.parse(Json::parse(R"({"type": "Whitespace"})"), kSource);
    FAIL() << "Whitespace was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.json: unsupported pre_tokenizer type 'Whitespace' (supported: Sequence, ByteLevel, Split, "
              "Metaspace, "
              "Digits)");
  }
  EXPECT_THROW(pre.parse(Json::parse(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "Glued"})"),
                         kSource),
               Error);
}

}  // namespace
}  // namespace moe::text
