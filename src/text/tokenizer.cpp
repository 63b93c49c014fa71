// tokenizer.json: loading its parts, then encode (added tokens -> normaliser -> pre-tokenizer -> BPE ->
// template) and decode (id -> token -> decoder), each part following the `tokenizers` library's semantics.
#include "moe/text/tokenizer.h"

#include <fstream>
#include <sstream>

#include "added_tokens.h"
#include "bpe.h"
#include "decoders.h"
#include "json_source.h"
#include "moe/core/check.h"
#include "core/text_file.h"
#include "normalizers.h"
#include "post_processor.h"
#include "pre_tokenizers.h"
#include "unicode_regex.h"
#include "vocabulary.h"

namespace moe {

using text::Json;

struct Tokenizer::Impl {
  text::Vocabulary vocab;
  text::Bpe model;
  text::AddedTokens added;
  text::Normalizer normalizer;
  text::PreTokenizer pre_tokenizer;
  text::Decoder decoder;
  text::PostProcessor post_processor;

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const {
    MOE_CHECK(text::is_valid_utf8(text), "text to tokenize is not valid UTF-8");
    std::vector<int32_t> ids;
    for (const text::Segment& raw : added.split_raw(std::string(text), true)) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      for (const text::Segment& seg : added.split_normalized(normalizer.normalize(raw.text), raw.at_start)) {
        if (seg.id >= 0) {
          ids.push_back(seg.id);
          continue;
        }
        for (const text::Piece& piece : pre_tokenizer.pre_tokenize({seg.text, seg.at_start}))
          model.encode(piece.text, vocab, ids);
      }
    }
    if (add_special_tokens) post_processor.apply(ids);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::vector<std::string> tokens;
    for (int32_t id : ids) {
      const std::string& token = vocab.token_of(id);
      if (skip_special_tokens && vocab.is_special(id)) continue;
      tokens.push_back(token);
    }
    return decoder.decode(std::move(tokens));
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  return from_json(read_text_file(path, "tokenizer file"), path.string());
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    MOE_FAIL("{}: not valid JSON: {}", source, e.what());
  }
  std::unique_ptr<Impl> impl;
  try {
    const text::JsonSource file{source};
    // The id tables are dense: ids are bounded by the number of tokens listed (vocab plus added tokens).
    int64_t listed = 0;
    if (j.is_object() && j.contains("model") && j["model"].is_object() && j["model"].contains("vocab"))
      listed += static_cast<int64_t>(j["model"]["vocab"].size());
    if (j.is_object() && j.contains("added_tokens") && j["added_tokens"].is_array())
      listed += static_cast<int64_t>(j["added_tokens"].size());
    text::Vocabulary vocab(file, listed);
    // Order matters: added tokens are normalised with the normaliser, and the post-processor names tokens.
    text::Bpe model = text::Bpe::parse(file.need(j, "model", "tokenizer.json"), file, vocab);
    text::Normalizer normalizer;
    normalizer.parse(j.value("normalizer", Json()), file);
    text::AddedTokens added;
    added.parse(j.value("added_tokens", Json()), file, vocab, normalizer);
    text::PreTokenizer pre_tokenizer;
    pre_tokenizer.parse(j.value("pre_tokenizer", Json()), file);
    text::Decoder decoder;
    decoder.parse(j.value("decoder", Json()), file);
    text::PostProcessor post_processor;
    post_processor.parse(j.value("post_processor", Json()), file, vocab);
    // NOTE: braces, not make_unique: clang 14 (the fuzz build) has no parenthesised aggregate initialisation.
    impl.reset(new Impl{std::move(vocab), std::move(model), std::move(added), std::move(normalizer),
                        std::move(pre_tokenizer), std::move(decoder), std::move(post_processor)});
  } catch (const Json::exception& e) {
    MOE_FAIL("{}: unexpected tokenizer.json structure: {}", source, e.what());
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(source)) throw;
    MOE_FAIL("{}: {}", source, e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab.size();
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  return impl_->vocab.id_of(std::string(token));
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  return impl_->vocab.token_of(id);
}

}  // namespace moe
