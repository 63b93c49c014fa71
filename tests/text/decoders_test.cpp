// The decoders alone: each step on a list of tokens, and the join without a decoder.
#include "decoders.h"

#include <gtest/gtest.h>

#include "moe/core/check.h"

namespace moe::text {
namespace {

const JsonSource kSource{"t.json"};

std::string decode(const char* json, std::vector<std::string> tokens) {
  Decoder decoder;
  decoder.parse(Json::parse(json), kSource);
  return decoder.decode(std::move(tokens));
}

TEST(Decoder, WithoutADecoderTheTokensAreJoinedWithSpaces) {
  EXPECT_EQ(decode("null", {"a", "b"}), "a b");
  EXPECT_EQ(decode(R"({"type": "Sequence", "decoders": []})", {"a", "b"}), "ab");  // a decoder, if empty
}

TEST(Decoder, ByteLevelUndoesGpt2sMap) {
  const char* json = R"({"type": "ByteLevel"})";
  EXPECT_EQ(decode(json, {"Hello", "\u0120world", "\u010a"}), "Hello world\n");
  EXPECT_EQ(decode(json, {"\u00c3", "\u00a9"}), "\u00e9");  // the bytes C3 A9 across two tokens
  EXPECT_EQ(decode(json, {"\u00c3"}), "\xEF\xBF\xBD");      // a lone lead byte: U+FFFD
  EXPECT_EQ(decode(json, {"\u4e13", "a"}), "\u4e13a");      // not in the map: the token as it is
}

TEST(Decoder, ByteFallbackGathersByteTokens) {
  const char* json = R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]})";
  EXPECT_EQ(decode(json, {"<0x41>", "<0xE2>", "<0x96>", "<0x81>", "x"}), "A\u2581x");
  // Invalid UTF-8: one U+FFFD per byte of the run.
  EXPECT_EQ(decode(json, {"a", "<0xE2>", "<0x96>", "b"}),
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(decode(json, {"<0x4G>", "<0x41"}), "<0x4G><0x41");
}

TEST(Decoder, StripReplaceAndMetaspace) {
  EXPECT_EQ(decode(R"({"type": "Strip", "content": " ", "start": 1, "stop": 0})", {" a", "  b", "c "}),
            "a bc ");
  EXPECT_EQ(decode(R"({"type": "Strip", "content": "x", "start": 0, "stop": 2})", {"axxx", "x"}), "ax");
  EXPECT_EQ(decode(R"({"type": "Replace", "pattern": {"String": "▁"}, "content": " "})", {"▁a", "▁b"}),
            " a b");
  // Metaspace drops the replacement in the first token when a prefix was added, keeps it as a space
  // otherwise.
  EXPECT_EQ(decode(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})",
                   {"▁Hello", "▁world"}),
            "Hello world");
  EXPECT_EQ(
      decode(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"})", {"▁Hello", "▁world"}),
      " Hello world");
}

TEST(Decoder, BadDecodersAreErrorsNamingThem) {
  Decoder decoder;
  try {
    decoder.parse(Json::parse(R"({"type": "WordPiece"})"), kSource);
    FAIL() << "WordPiece was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.json: unsupported decoder type 'WordPiece' (supported: Sequence, ByteLevel, Replace, "
              "ByteFallback, "
              "Fuse, Strip, Metaspace)");
  }
  EXPECT_THROW(decoder.parse(Json::parse(R"({"type": "Strip", "content": " ", "start": -1})"), kSource),
               Error);
}

}  // namespace
}  // namespace moe::text
