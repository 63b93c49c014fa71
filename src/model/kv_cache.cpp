#include "kv_cache.h"

#include <algorithm>

#include "moe/core/check.h"

namespace moe::model {

ModelKvCache::ModelKvCache(const void* owner, int64_t num_layers, int64_t num_sequences, int64_t max_length,
                           int64_t key_row, int64_t value_row)
    : owner_(owner), max_length_(max_length), key_row_(key_row), value_row_(value_row) {
  MOE_CHECK(num_sequences >= 1, "a KV cache needs at least one sequence, got {}", num_sequences);
  MOE_CHECK(max_length >= 1, "a KV cache needs max_length >= 1, got {}", max_length);
  lengths_.assign(num_sequences, 0);
  slots_.resize(num_layers * num_sequences);
}

int64_t ModelKvCache::length(int64_t seq) const {
  MOE_CHECK(seq >= 0 && seq < num_sequences(), "sequence {} is outside the cache's {} sequences", seq,
            num_sequences());
  return lengths_[seq];
}

void ModelKvCache::grow(std::vector<float>& data, int64_t floats) {
  if (static_cast<int64_t>(data.size()) >= floats) return;
  // NOTE: capacity doubles, so appending token by token copies each row O(1) times on average.
  if (static_cast<int64_t>(data.capacity()) < floats)
    data.reserve(std::max<size_t>(static_cast<size_t>(floats), 2 * data.capacity()));
  data.resize(floats);
}

float* ModelKvCache::keys(int64_t layer, int64_t seq, int64_t count) {
  const int64_t len = length(seq);
  MOE_CHECK(len + count <= max_length_, "sequence {} would hold {} tokens, more than the cache's max_length {}", seq,
            len + count, max_length_);
  Slot& s = slot(layer, seq);
  grow(s.k, (len + count) * key_row_);
  return s.k.data() + len * key_row_;
}

float* ModelKvCache::values(int64_t layer, int64_t seq, int64_t count) {
  const int64_t len = length(seq);
  Slot& s = slot(layer, seq);
  grow(s.v, (len + count) * value_row_);
  return s.v.data() + len * value_row_;
}

}  // namespace moe::model
