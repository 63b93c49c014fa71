#include <algorithm>
#include <cmath>
#include <vector>

#include "attention.h"
#include "moe/core/thread_pool.h"

namespace moe::model {

void attend(const Tensor& q, const BatchLayout& batch, const ModelKvCache& cache, int64_t layer, int64_t n_heads,
            int64_t kv_heads, int64_t dk, int64_t dv, double scale, Tensor& out) {
  const int64_t group = n_heads / kv_heads;
  const float* qs = q.data_as<float>();
  float* os = out.data_as<float>();
  // One work item per (span, head): each reads its sequence's cache once per new token.
  const int64_t items = static_cast<int64_t>(batch.spans.size()) * n_heads;
  ThreadPool::global().parallel_for(items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<double> scores, acc(dv);
    for (int64_t item = i0; item < i1; ++item) {
      const BatchLayout::Span& span = batch.spans[item / n_heads];
      const int64_t h = item % n_heads, kvh = h / group;
      const float* keys = cache.keys_at(layer, span.seq);
      const float* values = cache.values_at(layer, span.seq);
      for (int64_t i = 0; i < span.count; ++i) {
        const int64_t pos = span.start + i;
        const float* qrow = qs + ((span.row + i) * n_heads + h) * dk;
        scores.resize(pos + 1);
        double top = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          const float* krow = keys + (j * kv_heads + kvh) * dk;
          double dot = 0;
          for (int64_t d = 0; d < dk; ++d) dot += double{qrow[d]} * double{krow[d]};
          scores[j] = dot * scale;
          top = std::max(top, scores[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= pos; ++j) sum += scores[j] = std::exp(scores[j] - top);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          const float* vrow = values + (j * kv_heads + kvh) * dv;
          const double p = scores[j] / sum;
          for (int64_t d = 0; d < dv; ++d) acc[d] += p * double{vrow[d]};
        }
        float* orow = os + ((span.row + i) * n_heads + h) * dv;
        for (int64_t d = 0; d < dv; ++d) orow[d] = static_cast<float>(acc[d]);
      }
    }
  });
}

}  // namespace moe::model
