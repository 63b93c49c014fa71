// The BPE model alone: the merge loop's order, byte fallback, unk and ignore_merges on a vocabulary of a few
// tokens.
#include "bpe.h"

#include <gtest/gtest.h>

#include "moe/core/check.h"

namespace moe::text {
namespace {

const JsonSource kSource{"t.json"};

// A model over `vocab` ({"token": id}) with `merges` and extra options.
struct Model {
  Vocabulary vocab;
  Bpe bpe;

  Model(const Json& vocab_json, const Json& merges, Json options = Json::object())
      : vocab(kSource, static_cast<int64_t>(vocab_json.size())),
        bpe(parse(vocab_json, merges, std::move(options))) {}

  std::vector<int32_t> encode(const std::string& word) const {
    std::vector<int32_t> ids;
    bpe.encode(word, vocab, ids);
    return ids;
  }

 private:
  Bpe parse(const Json& vocab_json, const Json& merges, Json options) {
    options["type"] = "BPE";
    options["vocab"] = vocab_json;
    options["merges"] = merges;
    return Bpe::parse(options, kSource, vocab);
  }
};

const Json kAbc = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};

TEST(Bpe, TheLowestRankMergesFirst) {
  EXPECT_EQ(Model(kAbc, {"b c", "a b"}).encode("abc"), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(Model(kAbc, {"a b", "b c"}).encode("abc"), (std::vector<int32_t>{3, 2}));
  // The [left, right] form of a merge is the same merge; merged pieces merge again.
  EXPECT_EQ(Model(kAbc, {Json::array({"b", "c"}), "a bc"}).encode("abc"), std::vector<int32_t>{5});
  EXPECT_EQ(Model(kAbc, Json::array({"a b"})).encode(""), std::vector<int32_t>{});
}

TEST(Bpe, TheLeftmostPairMergesFirstAmongEqualRanks) {
  const Json vocab = {{"a", 0}, {"aa", 1}, {"aaaa", 2}};
  EXPECT_EQ(Model(vocab, Json::array({"a a"})).encode("aaa"), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(Model(vocab, {"a a", "aa aa"}).encode("aaaaa"), (std::vector<int32_t>{2, 0}));
}

TEST(Bpe, UnknownCharactersFallBackToBytesOrUnk) {
  const Json vocab = {{"a", 0}, {"<unk>", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  // "é" is C3 A9: both byte tokens exist. "ü" (C3 BC) lacks one, so it is unknown.
  EXPECT_EQ(Model(vocab, Json::array(), {{"byte_fallback", true}, {"unk_token", "<unk>"}}).encode("aéü"),
            (std::vector<int32_t>{0, 2, 3, 1}));
  EXPECT_EQ(Model(vocab, Json::array(), {{"unk_token", "<unk>"}}).encode("éüa"),
            (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(Model(vocab, Json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}}).encode("éüaü"),
            (std::vector<int32_t>{1, 0, 1}));
  // Without unk_token an unknown character gives no id at all, as in the library.
  EXPECT_EQ(Model(vocab, Json::array()).encode("üa"), std::vector<int32_t>{0});
}

TEST(Bpe, IgnoreMergesTakesAWordOfTheVocabularyWhole) {
  EXPECT_EQ(Model(kAbc, Json::array({"a b"}), {{"ignore_merges", true}}).encode("abc"),
            std::vector<int32_t>{5});
  EXPECT_EQ(Model(kAbc, Json::array({"a b"}), {{"ignore_merges", true}}).encode("abca"),
            (std::vector<int32_t>{3, 2, 0}));
}

TEST(Bpe, CharactersAreLookedUpWithTheAddedTokens) {
  Model model({{"a", 0}}, Json::array(), {{"unk_token", "a"}});
  EXPECT_EQ(model.encode("é"), std::vector<int32_t>{0});
  model.vocab.set(1, "é");  // as an added token would
  EXPECT_EQ(model.encode("é"), std::vector<int32_t>{1});
}

TEST(Bpe, BadModelsAreErrorsNamingThePart) {
  auto error = [](const Json& vocab, const Json& merges, const Json& options) {
    try {
      Model model(vocab, merges, options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(kAbc, Json::array({"a x"}), Json::object()),
            "t.json: merge 0 ('a' 'x') refers to a token that is not in the vocabulary");
  EXPECT_EQ(error(kAbc, Json::array({"ab"}), Json::object()),
            "t.json: merge 0 is not of the form \"left right\"");
  EXPECT_EQ(error(kAbc, Json::array(), {{"dropout", 0.1}}), "t.json: unsupported BPE option \"dropout\"");
  EXPECT_EQ(error(kAbc, Json::array(), {{"unk_token", "<unk>"}}),
            "t.json: unk_token '<unk>' is not in the vocabulary");
}

}  // namespace
}  // namespace moe::text
