#pragma once
// The KV cache of a batch of sequences: for every (layer, sequence) the key rows [length, kv_heads, dk]
// and value rows [length, kv_heads, dv] in fp32, grown geometrically (amortised O(1) per token, no copy
// of the whole cache per step). MLA caches the compressed latent (kv_a_layernorm applied) and the rotated
// rotary key, one "head" shared by all query heads, with kv_b_proj absorbed into the queries and the
// output (mla_attention.cpp).

#include <cstdint>
#include <vector>

#include "moe/model/causal_lm.h"

namespace moe::model {

class ModelKvCache final : public KvCache {
 public:
  // key_row / value_row: floats per token in one layer (kv_heads · dk, kv_heads · dv).
  ModelKvCache(const void* owner, int64_t num_layers, int64_t num_sequences, int64_t max_length, int64_t key_row,
               int64_t value_row);

  int64_t num_sequences() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t length(int64_t seq) const override;
  int64_t max_length() const { return max_length_; }
  const void* owner() const { return owner_; }

  // Room for `count` more tokens of sequence `seq` in `layer`; returns where token lengths(seq) + i's
  // key and value rows go. Pointers stay valid until the next reserve of the same (layer, seq).
  float* keys(int64_t layer, int64_t seq, int64_t count);
  float* values(int64_t layer, int64_t seq, int64_t count);
  // The first `length` rows (committed plus just written).
  const float* keys_at(int64_t layer, int64_t seq) const { return slot(layer, seq).k.data(); }
  const float* values_at(int64_t layer, int64_t seq) const { return slot(layer, seq).v.data(); }

  // After every layer has written its rows: the sequence now holds `count` more tokens.
  void commit(int64_t seq, int64_t count) { lengths_.at(seq) += count; }

 private:
  struct Slot {
    std::vector<float> k, v;
  };
  Slot& slot(int64_t layer, int64_t seq) { return slots_[layer * num_sequences() + seq]; }
  const Slot& slot(int64_t layer, int64_t seq) const { return slots_[layer * num_sequences() + seq]; }
  static void grow(std::vector<float>& data, int64_t floats);

  const void* owner_;
  int64_t max_length_, key_row_, value_row_;
  std::vector<int64_t> lengths_;
  std::vector<Slot> slots_;  // [layer][seq]
};

}  // namespace moe::model
