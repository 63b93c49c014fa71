#include <algorithm>
#include <vector>

#include "dot.h"
#include "core/thread_pool.h"
#include "cpu/ops.h"

namespace moe::cpu {

namespace {

void check_mlp_weights(const SwigluWeights& w, int64_t hidden) {
  const int64_t I = w.gate.dim() == 2 ? w.gate.size(0) : -1;
  MOE_CHECK(w.gate.dim() == 2 && w.gate.size(1) == hidden && w.up.shape() == w.gate.shape() && w.down.dim() == 2 &&
                w.down.size(0) == hidden && w.down.size(1) == I,
            "SwiGLU weights gate {} up {} down {} do not fit hidden size {}", w.gate.shape_string(),
            w.up.shape_string(), w.down.shape_string(), hidden);
  for (const Tensor* t : {&w.gate, &w.up, &w.down})
    MOE_CHECK(t->strides()[1] == 1 && dtype_is_float(t->dtype()), "SwiGLU weights must be float rows");
}

// out[r] = down · (silu(gate · rows[r]) ⊙ (up · rows[r])) for n rows of width H.
// NOTE: the loops run over weight rows on the outside so that each weight row is converted to fp32 once
// and reused for all n token rows; threads split the weight rows.
void swiglu_rows(const float* rows, int64_t n, int64_t H, const SwigluWeights& w, float* out) {
  if (n == 0) return;
  const int64_t I = w.gate.size(0);
  std::vector<float> gate(n * I), up(n * I), act(n * I);  // [n, I] each
  auto project = [&](const Tensor& weight, const float* in, int64_t in_width, int64_t out_width, float* result) {
    ThreadPool::global().parallel_for(out_width, 16, [&](int64_t o0, int64_t o1) {
      std::vector<float> row(in_width);
      for (int64_t o = o0; o < o1; ++o) {
        weight_row_f32(weight, o, row.data());
        for (int64_t r = 0; r < n; ++r)
          result[r * out_width + o] = static_cast<float>(dot_f64(in + r * in_width, row.data(), in_width));
      }
    });
  };
  project(w.gate, rows, H, I, gate.data());
  project(w.up, rows, H, I, up.data());
  silu_and_mul(gate, up, act);
  project(w.down, act.data(), I, H, out);
}

}  // namespace

Tensor swiglu_mlp(const Tensor& rows, const SwigluWeights& weights) {
  MOE_CHECK(rows.dim() == 2 && rows.dtype() == DType::F32 && rows.is_contiguous(),
            "swiglu_mlp expects contiguous F32 rows, got {} {}", dtype_name(rows.dtype()), rows.shape_string());
  const int64_t n = rows.size(0), H = rows.size(1);
  check_mlp_weights(weights, H);
  Tensor out = Tensor::empty(DType::F32, {n, H});  // [n, H]
  swiglu_rows(rows.data_as<float>(), n, H, weights, out.data_as<float>());
  return out;
}

Tensor grouped_swiglu(const ExpertBatch& batch, std::span<const SwigluWeights> experts, int expert_begin) {
  const int64_t n_rows = batch.rows.size(0), H = batch.rows.size(1);
  const int64_t n_experts = batch.expert_counts.size(0);
  const int64_t expert_end = expert_begin + static_cast<int64_t>(experts.size());
  MOE_CHECK(expert_begin >= 0 && expert_end <= n_experts, "expert range [{}, {}) outside the batch's {} experts",
            expert_begin, expert_end, n_experts);
  Tensor out = Tensor::zeros(DType::F32, {n_rows, H});  // [n_rows, H]
  const int64_t* offset = batch.expert_offsets.data_as<int64_t>();
  const int64_t* count = batch.expert_counts.data_as<int64_t>();
  for (int64_t e = expert_begin; e < expert_end; ++e) {
    if (count[e] == 0) continue;
    MOE_CHECK(offset[e] >= 0 && offset[e] + count[e] <= n_rows, "expert {} rows [{}, {}) outside the batch's {}",
              e, offset[e], offset[e] + count[e], n_rows);
    const SwigluWeights& w = experts[e - expert_begin];
    check_mlp_weights(w, H);
    swiglu_rows(batch.rows.data_as<float>() + offset[e] * H, count[e], H, w, out.data_as<float>() + offset[e] * H);
  }
  return out;
}

}  // namespace moe::cpu
