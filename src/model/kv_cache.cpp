#include "kv_cache.h"

#include <atomic>

#include "moe/core/check.h"

namespace moe::model {

KvBlockPool::KvBlockPool(const Shape& shape, const Storage& storage) : shape_(shape) {
  MOE_CHECK(shape.num_layers >= 1 && shape.num_blocks >= 1 && shape.block_tokens >= 1 && shape.key_row >= 1 &&
                shape.value_row >= 1 && shape.num_blocks <= INT32_MAX,
            "a KV block pool needs layers, blocks, tokens per block and row widths >= 1, got {}, {}, {}, {}, {}",
            shape.num_layers, shape.num_blocks, shape.block_tokens, shape.key_row, shape.value_row);
  // NOTE: uninitialised (Tensor::empty), so that the host pages of blocks never handed out are never touched.
  const Storage allocate = storage ? storage : [](std::vector<int64_t> s) { return Tensor::empty(DType::F32, std::move(s)); };
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    keys_.push_back(allocate({shape.num_blocks, shape.block_tokens, shape.key_row}));
    values_.push_back(allocate({shape.num_blocks, shape.block_tokens, shape.value_row}));
  }
  for (int64_t b = shape.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  in_use_.assign(shape.num_blocks, false);
}

int32_t KvBlockPool::allocate() {
  MOE_CHECK(!free_.empty(), "the KV cache is out of blocks: all {} blocks of {} tokens are in use",
            shape_.num_blocks, shape_.block_tokens);
  const int32_t block = free_.back();
  free_.pop_back();
  in_use_[block] = true;
  return block;
}

void KvBlockPool::free(int32_t block) {
  MOE_CHECK(block >= 0 && block < shape_.num_blocks && in_use_[block],
            "KV cache block {} is not in use (the pool has {} blocks)", block, shape_.num_blocks);
  in_use_[block] = false;
  free_.push_back(block);
}

float* KvBlockPool::keys(int64_t layer, int32_t block) const {
  return keys_.at(layer).data_as<float>() + block * shape_.block_tokens * shape_.key_row;
}

float* KvBlockPool::values(int64_t layer, int32_t block) const {
  return values_.at(layer).data_as<float>() + block * shape_.block_tokens * shape_.value_row;
}

namespace {

int64_t blocks_for(int64_t tokens, int64_t block_tokens) { return (tokens + block_tokens - 1) / block_tokens; }

}  // namespace

ModelKvCache::ModelKvCache(const void* owner, int64_t num_layers, int64_t num_sequences, int64_t max_length,
                           int64_t key_row, int64_t value_row, int64_t num_blocks,
                           const KvBlockPool::Storage& storage)
    : owner_(owner),
      serial_([] {
        static std::atomic<int64_t> caches{0};
        return ++caches;
      }()),
      max_length_(max_length),
      pool_([&] {
        MOE_CHECK(num_sequences >= 1, "a KV cache needs at least one sequence, got {}", num_sequences);
        MOE_CHECK(max_length >= 1, "a KV cache needs max_length >= 1, got {}", max_length);
        MOE_CHECK(num_blocks >= 0, "a KV cache needs num_blocks >= 0 (0: room for every sequence), got {}",
                  num_blocks);
        if (num_blocks == 0)
          num_blocks = checked_mul(num_sequences, blocks_for(max_length, kKvBlockTokens), "KV cache blocks");
        return KvBlockPool::Shape{.num_layers = num_layers, .num_blocks = num_blocks, .key_row = key_row,
                                  .value_row = value_row};
      }(), storage) {
  lengths_.assign(num_sequences, 0);
  tables_.resize(num_sequences);
}

int64_t ModelKvCache::block_bytes() const {
  const KvBlockPool::Shape& s = pool_.shape();
  return s.num_layers * s.block_tokens * (s.key_row + s.value_row) * static_cast<int64_t>(sizeof(float));
}

int64_t ModelKvCache::length(int64_t seq) const {
  MOE_CHECK(seq >= 0 && seq < num_sequences(), "sequence {} is outside the cache's {} sequences", seq,
            num_sequences());
  return lengths_[seq];
}

void ModelKvCache::reserve(int64_t seq, int64_t count) {
  const int64_t len = length(seq);
  MOE_CHECK(len + count <= max_length_, "sequence {} would hold {} tokens, more than the cache's max_length {}", seq,
            len + count, max_length_);
  std::vector<int32_t>& table = tables_[seq];
  while (static_cast<int64_t>(table.size()) < blocks_for(len + count, block_tokens())) table.push_back(pool_.allocate());
}

void ModelKvCache::release(int64_t seq) {
  length(seq);  // checks the index
  for (const int32_t block : tables_[seq]) pool_.free(block);
  tables_[seq].clear();
  lengths_[seq] = 0;
}

std::vector<float*> ModelKvCache::key_blocks(int64_t layer, int64_t seq) const {
  std::vector<float*> out;
  for (const int32_t block : tables_.at(seq)) out.push_back(pool_.keys(layer, block));
  return out;
}

std::vector<float*> ModelKvCache::value_blocks(int64_t layer, int64_t seq) const {
  std::vector<float*> out;
  for (const int32_t block : tables_.at(seq)) out.push_back(pool_.values(layer, block));
  return out;
}

}  // namespace moe::model
