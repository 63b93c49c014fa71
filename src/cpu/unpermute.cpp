#include <vector>

#include "core/thread_pool.h"
#include "cpu/ops.h"

namespace moe::cpu {

Tensor unpermute(const Tensor& expert_out, const ExpertBatch& batch) {
  const int64_t T = batch.pair_rows.size(0), k = batch.pair_rows.size(1), H = expert_out.size(1);
  const int64_t n_rows = expert_out.size(0);
  MOE_CHECK(expert_out.dtype() == DType::F32 && expert_out.is_contiguous() && n_rows == batch.rows.size(0),
            "expert output {} does not match the batch's {} rows", expert_out.shape_string(), batch.rows.size(0));
  const int32_t* pair_rows = batch.pair_rows.data_as<int32_t>();
  const float* pair_weights = batch.pair_weights.data_as<float>();
  const float* rows = expert_out.data_as<float>();
  Tensor out = Tensor::empty(DType::F32, {T, H});  // [T, H]
  float* result = out.data_as<float>();
  ThreadPool::global().parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    std::vector<double> sum(H);
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t row = pair_rows[t * k + j];
        if (row < 0) continue;  // dropped by the capacity limit
        MOE_CHECK(row < n_rows, "pair ({}, {}) points at row {} of {}", t, j, row, n_rows);
        const double w = pair_weights[t * k + j];
        for (int64_t h = 0; h < H; ++h) sum[h] += w * rows[row * H + h];
      }
      for (int64_t h = 0; h < H; ++h) result[t * H + h] = static_cast<float>(sum[h]);
    }
  });
  return out;
}

}  // namespace moe::cpu
