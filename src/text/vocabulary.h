#pragma once
// The ids of a tokenizer: the model's vocabulary and the added tokens in one dense table, as the library
// keeps them (an added token may take an id the model also lists).

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "json_source.h"

namespace moe::text {

class Vocabulary {
 public:
  // Ids may leave holes, but at most this many beyond the number of tokens the file lists: the id tables are
  // dense, so a forged id of 2^31 must be refused, not allocated for.
  static constexpr int64_t kMaxIdGap = 1 << 16;

  // `listed`: how many tokens the file lists (vocab plus added tokens), which bounds the ids.
  Vocabulary(JsonSource source, int64_t listed);

  // Gives `token` the id; an id that is negative or beyond the bound is an error naming the token.
  void set(int32_t id, const std::string& token);
  void set_special(int32_t id, bool special) { is_special_[id] = special; }

  // The largest id the file may use.
  int64_t max_id() const { return max_id_; }
  // One past the largest id set.
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  // Whether `id` has a token (ids may leave holes).
  bool contains(int32_t id) const { return id >= 0 && id < size() && has_token_[id]; }
  // The token's id, or -1.
  int32_t id_of(const std::string& token) const;
  // The token of `id`; an id outside the vocabulary is an error naming the file.
  const std::string& token_of(int32_t id) const;
  // Whether `id` (in the vocabulary) is an added token marked special.
  bool is_special(int32_t id) const { return is_special_[id]; }

 private:
  JsonSource source_;
  int64_t max_id_;
  std::unordered_map<std::string, int32_t> ids_;  // model vocabulary and added tokens
  std::vector<std::string> tokens_;               // [size]
  std::vector<bool> has_token_;                   // [size]
  std::vector<bool> is_special_;                  // [size]
};

}  // namespace moe::text
