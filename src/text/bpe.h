#pragma once
// tokenizer.json's "model" of type BPE: the merges, and how a pre-tokenized piece becomes ids (characters,
// or their byte tokens under byte_fallback, or unk, merged pair by pair in the order of the merges' ranks).

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_source.h"
#include "vocabulary.h"

namespace moe::text {

class Bpe {
 public:
  // Reads model `j`: its vocab into `vocab`, then its options and merges. Anything but BPE, or a BPE option
  // not supported (continuing_subword_prefix, end_of_word_suffix, dropout), is an error naming it.
  static Bpe parse(const Json& j, const JsonSource& source, Vocabulary& vocab);

  // Appends the ids of `word` (one pre-tokenized piece) to `out`. The characters are looked up in `vocab`
  // (added tokens included, as the library does); merges apply lowest rank first, leftmost first among
  // equals.
  void encode(const std::string& word, const Vocabulary& vocab, std::vector<int32_t>& out) const;

 private:
  static uint64_t pair_key(int32_t left, int32_t right);

  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged id)
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t unk_id_ = -1;
  std::vector<int32_t> byte_ids_;  // [256] id of <0xXX>, -1 when absent
};

}  // namespace moe::text
