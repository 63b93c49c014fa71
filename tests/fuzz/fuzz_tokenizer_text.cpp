// Encode and decode of the real tokenizers in tests/data/tokenizers on arbitrary input. Byte 0 picks the
// tokenizer and add/skip_special_tokens; the rest is the text to encode, and, read as little-endian int32,
// the ids to decode (taken modulo the vocabulary for the second decode, so that most of them decode).
// Invariants: every encoded id is in the vocabulary and its decode succeeds.
#include <map>

#include "fuzz_target.h"
#include "moe/text/tokenizer.h"

namespace moe::fuzz {

namespace {

const std::vector<Tokenizer>& tokenizers() {
  static const std::vector<Tokenizer> all = [] {
    std::vector<Tokenizer> list;
    std::map<std::string, std::filesystem::path> files;  // sorted: byte 0 picks the same one everywhere
    for (const auto& entry : std::filesystem::directory_iterator(MOE_TEST_DATA "/tokenizers"))
      if (std::filesystem::exists(entry.path() / "tokenizer.json"))
        files.emplace(entry.path().filename().string(), entry.path() / "tokenizer.json");
    for (const auto& [name, path] : files) list.push_back(Tokenizer::load(path));
    if (list.empty()) invariant_failed("tokenizers()", "no tokenizer under " MOE_TEST_DATA "/tokenizers");
    return list;
  }();
  return all;
}

}  // namespace

int fuzz_tokenizer_text(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tokenizer = tokenizers()[data[0] % tokenizers().size()];
  const bool special = (data[0] / tokenizers().size()) % 2 == 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const int32_t vocab = tokenizer.vocab_size();

  expect_errors([&] {
    const std::vector<int32_t> ids = tokenizer.encode(text, special);  // invalid UTF-8: a moe::Error
    for (int32_t id : ids) MOE_FUZZ_ASSERT(id >= 0 && id < vocab, "encode gave id {} of a vocabulary of {}", id, vocab);
    try {
      (void)tokenizer.decode(ids, special);
    } catch (const moe::Error& e) {
      MOE_FUZZ_ASSERT(false, "decoding the ids encode gave failed: {}", e.what());
    }
  });

  std::vector<int32_t> ids((size - 1) / 4), wrapped;
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;
    for (int b = 3; b >= 0; --b) v = (v << 8) | data[1 + 4 * i + b];
    ids[i] = static_cast<int32_t>(v);
    wrapped.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(vocab)));
  }
  expect_errors([&] { (void)tokenizer.decode(ids, special); });  // ids outside the vocabulary: a moe::Error
  expect_errors([&] { (void)tokenizer.decode(wrapped, special); });  // a hole in the ids: a moe::Error
  return 0;
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_tokenizer_text)
