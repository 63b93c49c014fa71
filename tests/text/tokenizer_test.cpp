// The tokenizer against the `tokenizers` library: tests/data/tokenizers/<name>/cases.json holds, for each
// string, the library's ids (add_special_tokens=False) and its decode of them
// (scripts/make_tokenizer_fixtures.py writes them).
#include "moe/text/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "moe/core/check.h"

namespace moe {
namespace {

const std::filesystem::path kData = std::filesystem::path(MOE_TEST_DATA) / "tokenizers";

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class TokenizerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerFixture, MatchesTheLibrary) {
  const auto folder = kData / GetParam();
  const Tokenizer tokenizer = Tokenizer::load(folder / "tokenizer.json");
  const auto cases = read_json(folder / "cases.json").at("cases");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const auto text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<int32_t>>();
    SCOPED_TRACE("text: \"" + text + "\"");
    const std::vector<int32_t> ids = tokenizer.encode(text);
    EXPECT_EQ(ids, expected);
    EXPECT_EQ(tokenizer.decode(expected), c.at("decoded").get<std::string>());
  }
}

TEST_P(TokenizerFixture, RoundTripsTextWithoutSpecialTokens) {
  // NOTE: the Metaspace decoder alone leaves byte-fallback tokens as "<0xF0>", in the library too.
  if (GetParam() == "metaspace_split") GTEST_SKIP() << "its decoder has no ByteFallback step";
  const Tokenizer tokenizer = Tokenizer::load(kData / GetParam() / "tokenizer.json");
  for (const std::string text : {"Hello world", "专家并行 and 😀 café", "a  b\n\n c 12345"})
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text) << text;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixture, ::testing::Values("qwen2", "gpt2", "llama", "llama_metaspace", "metaspace_split"),
                         [](const auto& info) { return info.param; });

TEST(Tokenizer, KeepsSpecialTokensWhole) {
  const Tokenizer tokenizer = Tokenizer::load(kData / "qwen2" / "tokenizer.json");
  const int32_t im_start = tokenizer.token_to_id("<|im_start|>");
  ASSERT_GE(im_start, 0);
  const auto ids = tokenizer.encode("<|im_start|>user");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], im_start);
  EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/true), "user");
}

TEST(Tokenizer, AddsTheTemplatePrefix) {
  auto j = read_json(kData / "llama" / "tokenizer.json");
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"pair", nlohmann::json::array()},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  const Tokenizer tokenizer = Tokenizer::from_json(j.dump(), "llama+template");
  const auto plain = tokenizer.encode("hello");
  auto with_bos = tokenizer.encode("hello", /*add_special_tokens=*/true);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 1);
}

TEST(Tokenizer, NfcNormalizerComposesDecomposedText) {
  auto j = read_json(kData / "qwen2" / "tokenizer.json");
  const Tokenizer plain = Tokenizer::from_json(j.dump(), "qwen2");
  j["normalizer"] = {{"type", "NFC"}};
  const Tokenizer nfc = Tokenizer::from_json(j.dump(), "qwen2+nfc");
  const std::string composed = "caf\u00e9 \u00c5ngstr\u00f6m", decomposed = "cafe\u0301 A\u030angstro\u0308m";
  EXPECT_EQ(nfc.encode(decomposed), plain.encode(composed));
  EXPECT_EQ(nfc.encode(composed), plain.encode(composed));
  EXPECT_NE(plain.encode(decomposed), plain.encode(composed));  // the normaliser is what makes them equal
}

TEST(Tokenizer, RejectsAnIdOutsideTheVocabulary) {
  const Tokenizer tokenizer = Tokenizer::load(kData / "gpt2" / "tokenizer.json");
  const std::vector<int32_t> ids = {tokenizer.vocab_size()};
  EXPECT_THROW(tokenizer.decode(ids), Error);
  EXPECT_THROW(tokenizer.encode("\xff"), Error);
}

// The error message of loading `j`, or "" when it loads.
std::string load_error(const nlohmann::json& j) {
  try {
    Tokenizer::from_json(j.dump(), "bad.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Tokenizer, BadFilesGiveClearErrors) {
  const auto good = read_json(kData / "gpt2" / "tokenizer.json");
  auto missing_model = good;
  missing_model.erase("model");

  EXPECT_NE(load_error(missing_model).find("no \"model\""), std::string::npos) << load_error(missing_model);

  auto unknown_pre = good;
  unknown_pre["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_NE(load_error(unknown_pre).find("unsupported pre_tokenizer type 'BertPreTokenizer'"), std::string::npos)
      << load_error(unknown_pre);

  auto unknown_model = good;
  unknown_model["model"]["type"] = "Unigram";
  EXPECT_NE(load_error(unknown_model).find("unsupported model type 'Unigram'"), std::string::npos);

  auto bad_merge = good;
  bad_merge["model"]["merges"].push_back(nlohmann::json::array({"no-such-token", "x"}));
  EXPECT_NE(load_error(bad_merge).find("not in the vocabulary"), std::string::npos) << load_error(bad_merge);

  auto bad_regex = good;
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(load_error(bad_regex).find("does not compile"), std::string::npos) << load_error(bad_regex);

  for (const auto& j : {missing_model, unknown_pre, bad_merge}) EXPECT_TRUE(load_error(j).starts_with("bad.json: "));

  EXPECT_THROW(Tokenizer::from_json("{ not json", "broken.json"), Error);
  EXPECT_THROW(Tokenizer::load(kData / "no-such-dir" / "tokenizer.json"), Error);
}

}  // namespace
}  // namespace moe
