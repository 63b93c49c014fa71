// TextStream, the incremental detokeniser: token by token, its text equals the tokenizer's decode of all the
// tokens at once, and its pieces add up to that text, on byte-level (GPT-2, Qwen2) and metaspace with
// byte-fallback (Llama, Mixtral) tokenizers, on multi-byte characters split over byte tokens.
#include "text_stream.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "moe/text/tokenizer.h"
#include "test_random.h"

namespace moe::engine {
namespace {

const std::filesystem::path kData = MOE_TEST_DATA;

// How the stream's text is held against the whole decode after each token.
enum class Check {
  every_token,          // byte-level tokenizers: their whole decode only ever grows at its end
  complete_characters,  // valid text through byte fallback: wherever the whole decode ends on a character
  pieces_only,          // random byte-fallback tokens: invalid runs differ by design (text_stream.h)
};

// Streams `ids` one at a time, checks the text after every token and returns the pieces joined.
std::string stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                   Check check = Check::complete_characters) {
  TextStream text(tokenizer, {});
  std::string pieces;
  for (size_t n = 1; n <= ids.size(); ++n) {
    EXPECT_FALSE(text.append(ids[n - 1]));
    pieces += text.take(/*finished=*/false);
    const std::string whole = tokenizer.decode(std::span(ids).first(n), /*skip_special_tokens=*/true);
    // Where the whole decode ends on a complete character, the stream agrees with it. (A byte-fallback run
    // that ends inside a character is all U+FFFD in the whole decode, its complete characters included.)
    if (check == Check::every_token ||
        (check == Check::complete_characters && !whole.ends_with("\xEF\xBF\xBD"))) {
      EXPECT_EQ(text.text(), whole) << "after " << n << " tokens";
    }
    EXPECT_TRUE(text.text().starts_with(pieces)) << "a piece handed out was not final";
  }
  pieces += text.take(/*finished=*/true);
  EXPECT_EQ(pieces, text.text());
  return pieces;
}

const char* const kTexts[] = {"Hello world, this is a test.",
                              "  leading spaces and\ttabs\nnew lines  ",
                              "héllo wörld — naïve café",
                              "你好，世界！日本語のテキスト",
                              "emoji 🙂🚀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math",
                              "ñ"};

TEST(TextStream, EqualsTheWholeDecodeOnEveryTokenizer) {
  for (const char* name : {"gpt2", "qwen2", "llama", "llama_metaspace", "metaspace_split"}) {
    SCOPED_TRACE(name);
    const Tokenizer tokenizer = Tokenizer::load(kData / "tokenizers" / name / "tokenizer.json");
    for (const char* t : kTexts) {
      const std::vector<int32_t> ids = tokenizer.encode(t);
      EXPECT_EQ(stream(tokenizer, ids), tokenizer.decode(ids, true)) << t;
    }
  }
}

TEST(TextStream, ByteFallbackTokensCompleteACharacterAcrossTokens) {
  const Tokenizer tokenizer = Tokenizer::load(kData / "models" / "mixtral" / "tokenizer.json");
  const auto byte = [&](const char* token) {
    const int32_t id = tokenizer.token_to_id(token);
    EXPECT_GE(id, 0) << token;
    return id;
  };
  // "▁a" then 🙂 (F0 9F 99 82) as four byte tokens, then "é" (C3 A9), then a stray continuation byte.
  const std::vector<int32_t> word = tokenizer.encode("a");
  std::vector<int32_t> ids = word;
  for (const char* b : {"<0xF0>", "<0x9F>", "<0x99>", "<0x82>", "<0xC3>", "<0xA9>", "<0x80>"})
    ids.push_back(byte(b));
  ids.insert(ids.end(), word.begin(), word.end());
  TextStream text(tokenizer, {});
  std::string pieces;
  for (size_t n = 0; n < ids.size(); ++n) {
    text.append(ids[n]);
    const std::string piece = text.take(/*finished=*/false);
    // No piece ever holds part of a character or a U+FFFD of bytes still to come.
    if (n >= word.size() && n < word.size() + 3) {
      EXPECT_EQ(piece, "") << "after " << n + 1 << " tokens";
    }
    pieces += piece;
  }
  pieces += text.take(/*finished=*/true);
  // The stray byte is one U+FFFD; the whole decode makes the run's every byte token one (see text_stream.h).
  EXPECT_EQ(pieces, "a🙂é\xEF\xBF\xBD a");
  std::vector<int32_t> valid = ids;
  valid.erase(valid.begin() + static_cast<std::ptrdiff_t>(word.size()) + 6);
  EXPECT_EQ(stream(tokenizer, valid), tokenizer.decode(valid, true));
  EXPECT_EQ(tokenizer.decode(valid, true), "a🙂é a");
}

TEST(TextStream, RandomTokensEqualTheWholeDecode) {
  test::TestRng rng;
  for (const char* path : {"models/qwen3_moe", "tokenizers/gpt2", "models/mixtral"}) {
    SCOPED_TRACE(path);
    const Tokenizer tokenizer = Tokenizer::load(kData / path / "tokenizer.json");
    const bool byte_level = std::string(path) != "models/mixtral";
    std::vector<int32_t> ids(200);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng.uniform_int(0, tokenizer.vocab_size() - 1));
    const std::string pieces = stream(tokenizer, ids, byte_level ? Check::every_token : Check::pieces_only);
    if (byte_level) {
      EXPECT_EQ(pieces, tokenizer.decode(ids, true));
    }
  }
}

TEST(TextStream, StopStringEndsTheTextAcrossTokens) {
  const Tokenizer tokenizer = Tokenizer::load(kData / "tokenizers" / "qwen2" / "tokenizer.json");
  const std::vector<int32_t> ids = tokenizer.encode("one two three four five");
  TextStream text(tokenizer, {"hree fo"});
  std::string pieces;
  bool stopped = false;
  for (int32_t id : ids) {
    if ((stopped = text.append(id))) break;
    pieces += text.take(false);
  }
  EXPECT_TRUE(stopped);
  pieces += text.take(true);
  EXPECT_EQ(pieces, "one two t");
  EXPECT_EQ(text.text(), "one two t");
}

}  // namespace
}  // namespace moe::engine
