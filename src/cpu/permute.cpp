#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/ops.h"

namespace moe::cpu {

namespace {

struct PairView {
  int64_t n_tokens, top_k;
  const int32_t* ids;
  const float* weights;
};

PairView check_pairs(const Tensor& x, const TopK& topk, int n_experts) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous(), "permute expects contiguous F32 [T, H]");
  MOE_CHECK(topk.ids.dim() == 2 && topk.ids.size(0) == x.size(0) && topk.ids.shape() == topk.weights.shape(),
            "topk ids {} / weights {} do not match {} tokens", topk.ids.shape_string(), topk.weights.shape_string(),
            x.size(0));
  const PairView p{x.size(0), topk.ids.size(1), topk.ids.data_as<int32_t>(), topk.weights.data_as<float>()};
  for (int64_t i = 0; i < p.n_tokens * p.top_k; ++i)
    MOE_CHECK(p.ids[i] >= 0 && p.ids[i] < n_experts, "expert id {} of pair {} out of range [0, {})", p.ids[i], i,
              n_experts);
  return p;
}

ExpertBatch new_batch(int64_t n_rows, int64_t hidden, int n_experts, const PairView& p) {
  ExpertBatch b;
  b.rows = Tensor::zeros(DType::F32, {n_rows, hidden});        // [n_rows, H]
  b.row_token = Tensor::empty(DType::I32, {n_rows});             // [n_rows]
  std::fill_n(b.row_token.data_as<int32_t>(), n_rows, -1);
  b.expert_offsets = Tensor::zeros(DType::I64, {n_experts});     // [E]
  b.expert_counts = Tensor::zeros(DType::I64, {n_experts});      // [E]
  b.pair_rows = Tensor::empty(DType::I32, {p.n_tokens, p.top_k});     // [T, k]
  b.pair_weights = Tensor::empty(DType::F32, {p.n_tokens, p.top_k});  // [T, k]
  b.dropped_per_expert = Tensor::zeros(DType::I64, {n_experts});      // [E]
  std::memcpy(b.pair_weights.data(), p.weights, b.pair_weights.nbytes());
  return b;
}

void copy_rows(const Tensor& x, ExpertBatch& b) {
  const int64_t H = x.size(1), n_rows = b.rows.size(0);
  const int32_t* token = b.row_token.data_as<int32_t>();
  for (int64_t r = 0; r < n_rows; ++r)
    if (token[r] >= 0)
      std::memcpy(b.rows.data_as<float>() + r * H, x.data_as<float>() + token[r] * H, H * sizeof(float));
}

}  // namespace

ExpertBatch permute_contiguous(const Tensor& x, const TopK& topk, int n_experts) {
  const PairView p = check_pairs(x, topk, n_experts);
  ExpertBatch b = new_batch(p.n_tokens * p.top_k, x.size(1), n_experts, p);
  int64_t* count = b.expert_counts.data_as<int64_t>();
  int64_t* offset = b.expert_offsets.data_as<int64_t>();
  for (int64_t i = 0; i < p.n_tokens * p.top_k; ++i) ++count[p.ids[i]];
  for (int e = 1; e < n_experts; ++e) offset[e] = offset[e - 1] + count[e - 1];  // exclusive scan
  std::vector<int64_t> cursor(offset, offset + n_experts);
  // NOTE: walking pairs in token order makes the scatter stable: an expert's rows stay in token order.
  for (int64_t t = 0; t < p.n_tokens; ++t)
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int64_t row = cursor[p.ids[t * p.top_k + j]]++;
      b.pair_rows.data_as<int32_t>()[t * p.top_k + j] = static_cast<int32_t>(row);
      b.row_token.data_as<int32_t>()[row] = static_cast<int32_t>(t);
    }
  copy_rows(x, b);
  return b;
}

ExpertBatch permute_padded(const Tensor& x, const TopK& topk, int n_experts, int64_t capacity,
                           OverflowPolicy overflow) {
  const PairView p = check_pairs(x, topk, n_experts);
  MOE_CHECK(capacity >= 0, "expert capacity must be non-negative, got {}", capacity);
  ExpertBatch b = new_batch(checked_mul(n_experts, capacity, "padded rows"), x.size(1), n_experts, p);
  b.capacity = capacity;
  int64_t* count = b.expert_counts.data_as<int64_t>();
  int64_t* dropped = b.dropped_per_expert.data_as<int64_t>();
  int32_t* pair_rows = b.pair_rows.data_as<int32_t>();
  float* pair_weights = b.pair_weights.data_as<float>();
  for (int e = 0; e < n_experts; ++e) b.expert_offsets.data_as<int64_t>()[e] = e * capacity;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    double original = 0.0, kept = 0.0;
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int64_t i = t * p.top_k + j;
      const int32_t e = p.ids[i];
      original += p.weights[i];
      if (count[e] < capacity) {
        const int64_t row = e * capacity + count[e]++;
        pair_rows[i] = static_cast<int32_t>(row);
        b.row_token.data_as<int32_t>()[row] = static_cast<int32_t>(t);
        kept += p.weights[i];
      } else {
        pair_rows[i] = -1;
        pair_weights[i] = 0.0f;
        ++dropped[e];
      }
    }
    // renormalize: the kept weights are rescaled to the token's original sum (a token that kept nothing,
    // or whose kept weights sum to zero, keeps what it has).
    if (overflow == OverflowPolicy::renormalize && kept != original && kept != 0.0)
      for (int64_t j = 0; j < p.top_k; ++j)
        pair_weights[t * p.top_k + j] = static_cast<float>(pair_weights[t * p.top_k + j] * (original / kept));
  }
  copy_rows(x, b);
  return b;
}

}  // namespace moe::cpu
