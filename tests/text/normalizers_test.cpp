// The normalisers alone: each step, and a Sequence applying them in order.
#include "normalizers.h"

#include <gtest/gtest.h>

#include "moe/core/check.h"

namespace moe::text {
namespace {

const JsonSource kSource{"t.json"};

std::string normalize(const char* json, const std::string& text) {
  Normalizer normalizer;
  normalizer.parse(Json::parse(json), kSource);
  return normalizer.normalize(text);
}

TEST(Normalizer, EachStep) {
  EXPECT_EQ(normalize("null", "a b"), "a b");
  EXPECT_EQ(normalize(R"({"type": "Prepend", "prepend": "▁"})", "a"), "▁a");
  EXPECT_EQ(normalize(R"({"type": "Prepend", "prepend": "▁"})", ""), "");  // nothing to prepend to
  EXPECT_EQ(normalize(R"({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})", "a b  c"),
            "a▁b▁▁c");
  EXPECT_EQ(normalize(R"({"type": "Replace", "pattern": {"Regex": "\\d+"}, "content": "#"})", "a12b3"),
            "a#b#");
  EXPECT_EQ(normalize(R"({"type": "NFC"})", "cafe\u0301 A\u030a"), "caf\u00e9 \u00c5");
}

TEST(Normalizer, ASequenceAppliesItsStepsInOrder) {
  EXPECT_EQ(normalize(R"({"type": "Sequence", "normalizers": [
                {"type": "Replace", "pattern": {"String": "a"}, "content": "b"},
                {"type": "Prepend", "prepend": "a"}]})",
                      "a"),
            "ab");
  EXPECT_EQ(normalize(R"({"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "a"},
                {"type": "Replace", "pattern": {"String": "a"}, "content": "b"}]})",
                      "a"),
            "bb");
}

TEST(Normalizer, UnsupportedStepsAreErrorsNamingThem) {
  Normalizer normalizer;
  try {
    normalizer.parse(Json::parse(R"({"type": "Lowercase"})"), kSource);
    FAIL() << "Lowercase was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.json: unsupported normalizer type 'Lowercase' (supported: Sequence, Prepend, Replace, NFC)");
  }
  try {
    normalizer.parse(Json::parse(R"({"type": "Replace", "pattern": {"Glob": "*"}, "content": ""})"), kSource);
    FAIL() << "a Glob pattern was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "t.json: normalizer Replace pattern is neither String nor Regex");
  }
}

}  // namespace
}  // namespace moe::text
