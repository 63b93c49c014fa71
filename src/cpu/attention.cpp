// The attention core in fp32 on the vectorised kernels of linear_kernels.h. One work item is a block of a
// span's new tokens and one KV head: the queries of every head that reads that KV head (GQA's group, all
// of MLA's heads) go through the cached keys together, so each key and value row is read once per item,
// not once per query head. Scores are materialised per item ([rows, length]), the softmax runs per row
// over its causal prefix, and the unnormalised probabilities multiply the values (divided once at the end).
// The keys and values are read block by block of the paged cache: the scores of block b fill columns
// [b · block_tokens, ...), and the value sums continue from block to block in the same order (AxpyTask's
// accumulate), so the result does not depend on the block size.
#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "linear_kernels.h"
#include "core/thread_pool.h"

namespace moe::cpu {

namespace {

// Query rows per item: enough to reuse each key row across rows, few enough that the scores of a long
// context ([64, length] floats: 8 MiB at 32k tokens) stay per-thread sized.
constexpr int64_t kQueryRows = 64;

}  // namespace

void attention(const Tensor& q, std::span<const AttentionSpan> spans, const AttentionParams& p, Tensor& out) {
  const int64_t n_heads = p.heads, kv_heads = p.kv_heads, dk = p.dk, dv = p.dv, bt = p.block_tokens;
  MOE_CHECK(kv_heads > 0 && n_heads % kv_heads == 0 && bt > 0, "attention: {} heads over {} KV heads, blocks of {}",
            n_heads, kv_heads, bt);
  const int64_t group = n_heads / kv_heads;
  const int64_t block = std::max<int64_t>(1, kQueryRows / group);  // tokens per item
  const float* qs = q.data_as<float>();
  float* os = out.data_as<float>();
  struct Item {
    const AttentionSpan* span;
    int64_t kv_head, first, count;  // tokens [first, first + count) of the span
  };
  std::vector<Item> items;
  for (const AttentionSpan& span : spans) {
    MOE_CHECK(static_cast<int64_t>(span.key_blocks.size()) * bt >= span.start + span.count &&
                  span.value_blocks.size() == span.key_blocks.size(),
              "attention: {} cache blocks of {} tokens do not hold {} positions", span.key_blocks.size(), bt,
              span.start + span.count);
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh)
      for (int64_t first = 0; first < span.count; first += block)
        items.push_back({&span, kvh, first, std::min(block, span.count - first)});
  }
  // NOTE: the longest items (the last tokens of long spans) first, so that the dynamic schedule ends even.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.span->start + a.first > b.span->start + b.first;
  });
  const LinearIsa isa = linear_isa();
  const auto fscale = static_cast<float>(p.scale);
  ThreadPool::global().parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<const float*> q_rows, p_rows;
    std::vector<float*> score_rows, block_rows, out_rows;
    std::vector<float> sums;
    for (int64_t it = i0; it < i1; ++it) {
      const Item& item = items[it];
      const AttentionSpan& span = *item.span;
      const int64_t rows = item.count * group;
      const int64_t length = span.start + item.first + item.count;  // keys the last token sees
      scores.resize(rows * length);
      q_rows.resize(rows), p_rows.resize(rows), score_rows.resize(rows), block_rows.resize(rows),
          out_rows.resize(rows), sums.resize(rows);
      for (int64_t i = 0; i < item.count; ++i)
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = i * group + g, token = span.row + item.first + i, h = item.kv_head * group + g;
          q_rows[r] = qs + (token * n_heads + h) * dk;
          out_rows[r] = os + (token * n_heads + h) * dv;
          score_rows[r] = scores.data() + r * length;
        }
      // Scores, block by block: columns [j0, j0 + n) of every row from block b's keys.
      for (int64_t b = 0, j0 = 0; j0 < length; ++b, j0 += bt) {
        const int64_t n = std::min(bt, length - j0);
        for (int64_t r = 0; r < rows; ++r) block_rows[r] = score_rows[r] + j0;
        dot_rows(isa,
                 {.x = q_rows.data(),
                  .n = rows,
                  .k = dk,
                  .w = span.key_blocks[b] + item.kv_head * dk,
                  .w_dtype = DType::F32,
                  .w_stride = kv_heads * dk,
                  .y = block_rows.data()},
                 0, n);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t visible = span.start + item.first + r / group + 1;  // causal: keys [0, pos]
        float* s = score_rows[r];
        float top = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) top = std::max(top, s[j] *= fscale);
        float sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += s[j] = std::exp(s[j] - top);
        std::fill(s + visible, s + length, 0.0f);
        sums[r] = sum;
      }
      // Probabilities · values, block by block, each block's sums continuing from the last.
      for (int64_t b = 0, j0 = 0; j0 < length; ++b, j0 += bt) {
        const int64_t n = std::min(bt, length - j0);
        for (int64_t r = 0; r < rows; ++r) p_rows[r] = score_rows[r] + j0;
        axpy_rows(isa,
                  {.a = p_rows.data(),
                   .n = rows,
                   .j = n,
                   .w = span.value_blocks[b] + item.kv_head * dv,
                   .w_dtype = DType::F32,
                   .w_stride = kv_heads * dv,
                   .y = out_rows.data(),
                   .accumulate = j0 > 0},
                  0, dv);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const float inv = 1.0f / sums[r];
        for (int64_t d = 0; d < dv; ++d) out_rows[r][d] *= inv;
      }
    }
  });
}

void append_kv(const Tensor& rows, int64_t row, int64_t count, int64_t start, std::span<float* const> blocks,
               int64_t block_tokens) {
  MOE_CHECK(rows.dim() == 2 && rows.dtype() == DType::F32 && rows.strides()[1] == 1,
            "append_kv expects F32 rows, got {}", rows.shape_string());
  MOE_CHECK(static_cast<int64_t>(blocks.size()) * block_tokens >= start + count,
            "append_kv: {} blocks of {} tokens do not hold {} positions", blocks.size(), block_tokens, start + count);
  const int64_t width = rows.size(1), stride = rows.strides()[0];
  const float* src = rows.data_as<float>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = start + i;
    std::copy_n(src + (row + i) * stride, width, blocks[pos / block_tokens] + (pos % block_tokens) * width);
  }
}

}  // namespace moe::cpu
