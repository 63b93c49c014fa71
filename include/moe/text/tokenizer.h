#pragma once
// A HuggingFace tokenizer.json reader: BPE models, byte-level (GPT-2, Qwen2, DeepSeek, OLMoE) and
// metaspace/byte-fallback (Llama, Mixtral). Encodes text to ids and decodes ids to text exactly as the
// `tokenizers` library does for the components it supports; any other component is a moe::Error that names
// it and the file.
//
// Supported: model BPE (vocab, merges in "a b" or ["a", "b"] form, byte_fallback, unk_token, fuse_unk,
// ignore_merges); added_tokens (matched whole before normalisation, leftmost-longest; lstrip, rstrip,
// single_word, normalized); normalizers Sequence, Prepend, Replace, NFC (utf8proc); pre-tokenizers Sequence, ByteLevel, Split, Metaspace, Digits;
// decoders Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace; post-processors
// TemplateProcessing (single sequence), ByteLevel and Sequence of those.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

class Tokenizer {
 public:
  // Reads a tokenizer.json; throws moe::Error naming the file and the unsupported or broken part.
  static Tokenizer load(const std::filesystem::path& path);
  // The same from the JSON text; `source` names it in errors.
  static Tokenizer from_json(std::string_view json_text, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ids of `text` (valid UTF-8). add_special_tokens applies the post-processor's template for a single
  // sequence (e.g. Llama's leading <s>); off by default, as for `tokenizers` fixtures and chat templates.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Text of `ids`; an id outside the vocabulary is a moe::Error. Invalid UTF-8 from byte tokens becomes
  // U+FFFD, as the library does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // One past the largest id (vocabulary plus added tokens).
  int32_t vocab_size() const;
  // The token's id, or -1 when it is not in the vocabulary or the added tokens.
  int32_t token_to_id(std::string_view token) const;
  // The token's string; throws for an id outside [0, vocab_size()) or a hole in the ids.
  const std::string& id_to_token(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe
