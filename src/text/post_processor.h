#pragma once
// tokenizer.json's "post_processor" for a single sequence: the ids put around it when special tokens are
// asked for (TemplateProcessing, e.g. Llama's leading <s>; ByteLevel adds none; Sequence of those).

#include <cstdint>
#include <vector>

#include "json_source.h"
#include "vocabulary.h"

namespace moe::text {

class PostProcessor {
 public:
  // Reads post_processor `j` (null: none); a template naming a token outside `vocab` is an error.
  void parse(const Json& j, const JsonSource& source, const Vocabulary& vocab);
  // `ids` between the template's prefix and suffix.
  void apply(std::vector<int32_t>& ids) const;

 private:
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // the template's special tokens before / after the sequence
};

}  // namespace moe::text
