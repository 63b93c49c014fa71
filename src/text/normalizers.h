#pragma once
// tokenizer.json's "normalizer": the steps applied to text (and to added tokens marked normalized) before it
// is pre-tokenized: Sequence, Prepend, Replace, NFC.

#include <string>
#include <variant>
#include <vector>

#include "json_source.h"
#include "pattern.h"

namespace moe::text {

class Normalizer {
 public:
  // Appends the steps of normalizer `j` (null: none); an unsupported type is an error naming it.
  void parse(const Json& j, const JsonSource& source);
  // `text` through every step in order; no step at all leaves it as it is.
  std::string normalize(std::string text) const;

 private:
  struct Prepend {
    std::string text;  // put before non-empty text
  };
  struct Nfc {};  // Unicode canonical composition (utf8proc), as Qwen2's files ask
  using Step = std::variant<Prepend, ReplaceText, Nfc>;
  std::vector<Step> steps_;
};

}  // namespace moe::text
