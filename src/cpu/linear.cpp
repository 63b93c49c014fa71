#include "cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "linear_kernels.h"
#include "core/thread_pool.h"

namespace moe::cpu {

namespace {

// Pointers to the rows of a contiguous [rows, width] F32 buffer.
template <class T>
std::vector<T*> row_pointers(T* base, int64_t rows, int64_t width) {
  std::vector<T*> out(rows);
  for (int64_t r = 0; r < rows; ++r) out[r] = base + r * width;
  return out;
}

void check_mla(const Tensor& kv_b, const MlaDims& d) {
  MOE_CHECK(kv_b.dim() == 2 && kv_b.size(0) == d.heads * (d.nope + d.v) && kv_b.size(1) == d.rank,
            "mla: kv_b_proj {} is not [{} x ({} + {}), {}]", kv_b.shape_string(), d.heads, d.nope, d.v, d.rank);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearIsa isa) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous(), "linear expects contiguous F32 rows");
  MOE_CHECK(weight.dim() == 2 && weight.size(1) == x.size(1) && weight.strides()[1] == 1,
            "linear: weight {} does not take rows of width {}", weight.shape_string(), x.size(1));
  const int64_t T = x.size(0), in = x.size(1), out = weight.size(0);
  MOE_CHECK(!bias.defined() || (bias.dtype() == DType::F32 && bias.numel() == out), "linear: bias must be [{}] F32",
            out);
  Tensor y = Tensor::empty(DType::F32, {T, out});  // [T, out]
  const std::vector<const float*> xs = row_pointers<const float>(x.data_as<float>(), T, in);
  const std::vector<float*> ys = row_pointers(y.data_as<float>(), T, out);
  const DotTask task{.x = xs.data(), .n = T, .k = in, .w = weight.data(), .w_dtype = weight.dtype(),
                     .w_stride = weight.strides()[0], .y = ys.data()};
  // NOTE: 64 rows per chunk (a multiple of every ISA's tile): 256 KiB of BF16 weights at in = 2048, which
  // stays in L2 next to a block of activations while the block's tokens pass over it.
  ThreadPool::global().parallel_for(out, 64, [&](int64_t o0, int64_t o1) {
    dot_rows(isa, task, o0, o1);
    if (bias.defined())
      for (int64_t t = 0; t < T; ++t)
        for (int64_t o = o0; o < o1; ++o) ys[t][o] += bias.data_as<float>()[o];
  });
  return y;
}

Tensor swiglu_mlp(const Tensor& x, const Tensor& gate_weight, const Tensor& up_weight, const Tensor& down_weight) {
  Tensor gate = linear(x, gate_weight);  // [T, I]
  const Tensor up = linear(x, up_weight);
  float* g = gate.data_as<float>();
  const float* u = up.data_as<float>();
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const float silu = static_cast<float>(double{g[i]} / (1.0 + std::exp(-double{g[i]})));
    g[i] = silu * u[i];
  }
  return linear(gate, down_weight);  // [T, H]
}

Tensor mla_absorb_queries(const Tensor& q, const Tensor& kv_b, const MlaDims& d) {
  check_mla(kv_b, d);
  const int64_t T = q.size(0), nh = d.heads, nope = d.nope, rope_dim = d.rope, rank = d.rank;
  const int64_t dqk = nope + rope_dim, dk = rank + rope_dim;
  MOE_CHECK(q.dim() == 2 && q.dtype() == DType::F32 && q.is_contiguous() && q.size(1) == nh * dqk,
            "mla_absorb_queries: q {} is not [T, {} x {}]", q.shape_string(), nh, dqk);
  Tensor q_latent = Tensor::empty(DType::F32, {T, nh * dk});  // [T, nh, rank + rope]
  float* ql = q_latent.data_as<float>();
  const float* qs = q.data_as<float>();
  const LinearIsa isa = linear_isa();
  ThreadPool::global().parallel_for(nh, 1, [&](int64_t h0, int64_t h1) {
    std::vector<const float*> q_nope(T);
    std::vector<float*> dst(T);
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        q_nope[t] = qs + (t * nh + h) * dqk;
        dst[t] = ql + (t * nh + h) * dk;
        std::copy_n(q_nope[t] + nope, rope_dim, dst[t] + rank);
      }
      const Tensor w_uk = kv_b.narrow(0, h * (nope + d.v), nope);  // [nope, rank]
      axpy_rows(isa,
                {.a = q_nope.data(), .n = T, .j = nope, .w = w_uk.data(), .w_dtype = w_uk.dtype(),
                 .w_stride = w_uk.strides()[0], .y = dst.data()},
                0, rank);
    }
  });
  return q_latent;
}

Tensor mla_expand_context(const Tensor& context, const Tensor& kv_b, const MlaDims& d) {
  check_mla(kv_b, d);
  const int64_t T = context.size(0), nh = d.heads, nope = d.nope, dv = d.v, rank = d.rank;
  MOE_CHECK(context.dim() == 2 && context.dtype() == DType::F32 && context.is_contiguous() &&
                context.size(1) == nh * rank,
            "mla_expand_context: context {} is not [T, {} x {}]", context.shape_string(), nh, rank);
  Tensor out = Tensor::empty(DType::F32, {T, nh * dv});  // [T, nh * dv]
  const LinearIsa isa = linear_isa();
  ThreadPool::global().parallel_for(nh, 1, [&](int64_t h0, int64_t h1) {
    std::vector<const float*> ctx(T);
    std::vector<float*> dst(T);
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        ctx[t] = context.data_as<float>() + (t * nh + h) * rank;
        dst[t] = out.data_as<float>() + (t * nh + h) * dv;
      }
      const Tensor w_uv = kv_b.narrow(0, h * (nope + dv) + nope, dv);  // [dv, rank]
      dot_rows(isa,
               {.x = ctx.data(), .n = T, .k = rank, .w = w_uv.data(), .w_dtype = w_uv.dtype(),
                .w_stride = w_uv.strides()[0], .y = dst.data()},
               0, dv);
    }
  });
  return out;
}

}  // namespace moe::cpu
