// The attention core in fp32 on the vectorised kernels of linear_kernels.h. One work item is a block of a
// span's new tokens and one KV head: the queries of every head that reads that KV head (GQA's group, all
// of MLA's heads) go through the cached keys together, so each key and value row is read once per item,
// not once per query head. Scores are materialised per item ([rows, length]), the softmax runs per row
// over its causal prefix, and the unnormalised probabilities multiply the values (divided once at the end).
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention.h"
#include "linear_kernels.h"
#include "moe/core/thread_pool.h"

namespace moe::model {

namespace {

// Query rows per item: enough to reuse each key row across rows, few enough that the scores of a long
// context ([64, length] floats: 8 MiB at 32k tokens) stay per-thread sized.
constexpr int64_t kQueryRows = 64;

}  // namespace

void attend(const Tensor& q, const BatchLayout& batch, const ModelKvCache& cache, int64_t layer,
            int64_t n_heads, int64_t kv_heads, int64_t dk, int64_t dv, double scale, Tensor& out) {
  const int64_t group = n_heads / kv_heads;
  const int64_t block = std::max<int64_t>(1, kQueryRows / group);  // tokens per item
  const float* qs = q.data_as<float>();
  float* os = out.data_as<float>();
  struct Item {
    const BatchLayout::Span* span;
    int64_t kv_head, first, count;  // tokens [first, first + count) of the span
  };
  std::vector<Item> items;
  for (const BatchLayout::Span& span : batch.spans)
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh)
      for (int64_t first = 0; first < span.count; first += block)
        items.push_back({&span, kvh, first, std::min(block, span.count - first)});
  // NOTE: the longest items (the last tokens of long spans) first, so that the dynamic schedule ends even.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.span->start + a.first > b.span->start + b.first;
  });
  const LinearIsa isa = linear_isa();
  const auto fscale = static_cast<float>(scale);
  ThreadPool::global().parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<const float*> q_rows, p_rows;
    std::vector<float*> score_rows, out_rows;
    std::vector<float> sums;
    for (int64_t it = i0; it < i1; ++it) {
      const Item& item = items[it];
      const BatchLayout::Span& span = *item.span;
      const int64_t rows = item.count * group;
      const int64_t length = span.start + item.first + item.count;  // keys the last token sees
      scores.resize(rows * length);
      q_rows.resize(rows), p_rows.resize(rows), score_rows.resize(rows), out_rows.resize(rows),
          sums.resize(rows);
      for (int64_t i = 0; i < item.count; ++i)
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = i * group + g, token = span.row + item.first + i, h = item.kv_head * group + g;
          q_rows[r] = qs + (token * n_heads + h) * dk;
          out_rows[r] = os + (token * n_heads + h) * dv;
          score_rows[r] = scores.data() + r * length;
          p_rows[r] = score_rows[r];
        }
      const float* keys = cache.keys_at(layer, span.seq) + item.kv_head * dk;
      const float* values = cache.values_at(layer, span.seq) + item.kv_head * dv;
      dot_rows(isa,
               {.x = q_rows.data(),
                .n = rows,
                .k = dk,
                .w = keys,
                .w_dtype = DType::F32,
                .w_stride = kv_heads * dk,
                .y = score_rows.data()},
               0, length);
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
      axpy_rows(isa,
                {.a = p_rows.data(),
                 .n = rows,
                 .j = length,
                 .w = values,
                 .w_dtype = DType::F32,
                 .w_stride = kv_heads * dv,
                 .y = out_rows.data()},
                0, dv);
      for (int64_t r = 0; r < rows; ++r) {
        const float inv = 1.0f / sums[r];
        for (int64_t d = 0; d < dv; ++d) out_rows[r][d] *= inv;
      }
    }
  });
}

}  // namespace moe::model
