#pragma once
// The paged KV cache: fixed-size blocks of key and value rows in one pool for every layer, and a block table
// per sequence (position p of a sequence sits in its table's block p / block_tokens, row p % block_tokens).
// A sequence takes blocks as it grows and gives them back when released, so that a scheduler can admit
// sequences by free blocks rather than by their longest possible length. The blocks are Tensors in the
// memory the pool's storage function gives (host memory by default, the GPU's for its ops); the attention
// op reads them through the block table, never as one contiguous array.
// GQA caches the keys [kv_heads, head_dim] and values [kv_heads, head_dim] of each token; MLA the compressed
// latent (kv_a_layernorm applied) and the rotated rotary key as its one key head [rank + rope], the latent
// as its value [rank], with kv_b_proj absorbed into the queries and the output (mla_attention.cpp).

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "moe/core/tensor.h"
#include "moe/model/causal_lm.h"

namespace moe::model {

// Tokens per block: small enough that a sequence wastes at most 15 rows, large enough that attention reads
// each block's rows as one strided matrix.
inline constexpr int64_t kKvBlockTokens = 16;

class KvBlockPool {
 public:
  struct Shape {
    int64_t num_layers = 0, num_blocks = 0, block_tokens = kKvBlockTokens;
    int64_t key_row = 0, value_row = 0;  // floats per token and layer
  };
  // Memory for one layer's keys or values, [num_blocks, block_tokens, row] F32 (DecoderOps::kv_blocks);
  // empty: uninitialised host memory.
  using Storage = std::function<Tensor(std::vector<int64_t> shape)>;
  explicit KvBlockPool(const Shape& shape, const Storage& storage = {});

  const Shape& shape() const { return shape_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // A free block (the lowest-numbered one of those never used, else the last freed); a moe::Error naming
  // the pool's size when none is left.
  int32_t allocate();
  // Gives `block` back; freeing a block twice, or one outside the pool, is an error.
  void free(int32_t block);

  // Block `block`'s rows of `layer`: keys [block_tokens, key_row], values [block_tokens, value_row] F32,
  // in the storage's memory (block 0's: the start of the layer's pool).
  float* keys(int64_t layer, int32_t block) const;
  float* values(int64_t layer, int32_t block) const;

 private:
  Shape shape_;
  std::vector<Tensor> keys_, values_;  // per layer [num_blocks, block_tokens, key_row | value_row]
  std::vector<int32_t> free_;          // a stack: the next block to hand out last
  std::vector<bool> in_use_;           // [num_blocks]
};

class ModelKvCache final : public KvCache {
 public:
  // A pool of `num_blocks` blocks (0: room for every sequence at max_length) shared by the sequences, which
  // take blocks as they grow, in `storage` (empty: host memory).
  ModelKvCache(const void* owner, int64_t num_layers, int64_t num_sequences, int64_t max_length, int64_t key_row,
               int64_t value_row, int64_t num_blocks = 0, const KvBlockPool::Storage& storage = {});

  int64_t num_sequences() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t length(int64_t seq) const override;
  int64_t max_length() const { return max_length_; }
  const void* owner() const { return owner_; }
  // A number no other cache of this process has had: a recorded step reads and writes one cache's pool.
  int64_t serial() const { return serial_; }
  int64_t block_tokens() const override { return pool_.shape().block_tokens; }
  int64_t total_blocks() const override { return pool_.shape().num_blocks; }
  int64_t free_blocks() const override { return pool_.free_blocks(); }
  int64_t block_bytes() const override;
  const KvBlockPool& pool() const { return pool_; }
  // Sequence `seq`'s blocks, in position order.
  const std::vector<int32_t>& block_table(int64_t seq) const { return tables_.at(seq); }

  // Blocks for `count` more tokens of sequence `seq` (beyond its length), taken from the pool.
  void reserve(int64_t seq, int64_t count);
  // After every layer has written its rows: the sequence now holds `count` more tokens.
  void commit(int64_t seq, int64_t count) { lengths_.at(seq) += count; }
  // Empties sequence `seq` and gives its blocks back to the pool.
  void release(int64_t seq) override;

  // The block pointers of sequence `seq` in `layer`, in position order (for the attention op).
  std::vector<float*> key_blocks(int64_t layer, int64_t seq) const;
  std::vector<float*> value_blocks(int64_t layer, int64_t seq) const;

 private:
  const void* owner_;
  int64_t serial_;
  int64_t max_length_;
  KvBlockPool pool_;
  std::vector<int64_t> lengths_;
  std::vector<std::vector<int32_t>> tables_;  // [seq] block ids
};

}  // namespace moe::model
