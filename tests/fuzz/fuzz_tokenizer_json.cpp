// The tokenizer.json loader on arbitrary text; a tokenizer that loads then encodes a few fixed texts (plain,
// spaces, digits, non-ASCII, its own tokens) and decodes what it produced and the first ids of its vocabulary.
#include "fuzz_target.h"
#include "moe/text/tokenizer.h"

namespace moe::fuzz {

int fuzz_tokenizer_json(const uint8_t* data, size_t size) {
  return expect_errors([&] {
    const Tokenizer tokenizer =
        Tokenizer::from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz tokenizer.json");
    const int32_t vocab = tokenizer.vocab_size();
    MOE_FUZZ_ASSERT(vocab >= 0, "vocab_size {}", vocab);
    for (const char* text : {"Hello world", "  a\tb\n\n 12345 ", "\xC3\xA9t\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80", ""}) {
      for (bool special : {false, true}) {
        const std::vector<int32_t> ids = tokenizer.encode(text, special);
        for (int32_t id : ids) MOE_FUZZ_ASSERT(id >= 0 && id < vocab, "encode gave id {} of a vocabulary of {}", id, vocab);
        expect_errors([&] { (void)tokenizer.decode(ids, special); });
      }
    }
    std::vector<int32_t> first;
    for (int32_t id = 0; id < std::min(vocab, 64); ++id) {
      expect_errors([&] {
        const std::string& token = tokenizer.id_to_token(id);
        (void)tokenizer.encode(token);
        first.push_back(id);
      });
    }
    (void)tokenizer.decode(first, false);
    (void)tokenizer.decode(first, true);
  });
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_tokenizer_json)
