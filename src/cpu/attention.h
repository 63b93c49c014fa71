#pragma once
// Causal attention on the CPU in fp32 over a paged KV cache: each sequence's keys and values sit in blocks of
// block_tokens rows (block b holds positions [b · block_tokens, (b + 1) · block_tokens)), found through the
// sequence's list of block pointers. GQA: query head h reads KV head h / (heads / kv_heads); MLA runs as one
// KV head of [latent | k_rot] keys and latent values (model/mla_attention.cpp).

#include <cstdint>
#include <span>

#include "moe/core/tensor.h"

namespace moe::cpu {

// One sequence's new tokens in the batch: rows [row, row + count) of q, at positions [start, start + count);
// its cached rows (the new ones already written) through its blocks.
struct AttentionSpan {
  int64_t row = 0, count = 0, start = 0;
  std::span<const float* const> key_blocks;    // each [block_tokens, kv_heads · dk]
  std::span<const float* const> value_blocks;  // each [block_tokens, kv_heads · dv]
};

struct AttentionParams {
  int64_t heads = 0, kv_heads = 0, dk = 0, dv = 0;
  int64_t block_tokens = 0;
  double scale = 1.0;  // multiplies q·k
};

// q [T, heads, dk] F32 (rows in batch order) -> out [T, heads, dv] F32. Token i of a span sees positions
// [0, start + i] (causal; no sliding window: the model refuses lengths where one would bite).
void attention(const Tensor& q, std::span<const AttentionSpan> spans, const AttentionParams& params, Tensor& out);

// Writes rows [row, row + count) of `rows` [T, width] (F32; rows may be a strided view) into a sequence's
// blocks at positions [start, start + count).
void append_kv(const Tensor& rows, int64_t row, int64_t count, int64_t start, std::span<float* const> blocks,
               int64_t block_tokens);

}  // namespace moe::cpu
