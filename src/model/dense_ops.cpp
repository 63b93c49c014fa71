#include "dense_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "moe/core/float_convert.h"
#include "moe/core/thread_pool.h"

namespace moe::model {

namespace {

// Row r of a 2-D weight as F32: in place for F32, else converted into `buffer`.
const float* row_f32(const Tensor& w, int64_t r, std::vector<float>& buffer) {
  const int64_t cols = w.size(1);
  const char* base = static_cast<const char*>(w.data()) + r * w.strides()[0] * int64_t(dtype_size(w.dtype()));
  if (w.dtype() == DType::F32) return reinterpret_cast<const float*>(base);
  buffer.resize(cols);
  convert_to_f32(base, w.dtype(), buffer.data(), static_cast<size_t>(cols));
  return buffer.data();
}

// Pointers to the rows of a contiguous [rows, width] F32 buffer.
template <class T>
std::vector<T*> row_pointers(T* base, int64_t rows, int64_t width) {
  std::vector<T*> out(rows);
  for (int64_t r = 0; r < rows; ++r) out[r] = base + r * width;
  return out;
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

void rms_norm_groups(Tensor& x, const Tensor& weight, double eps, int64_t width) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous() && x.size(1) % width == 0,
            "rms_norm: rows of width {} do not split into groups of {}", x.size(1), width);
  MOE_CHECK(weight.dtype() == DType::F32 && weight.numel() == width, "rms_norm: weight must be [{}] F32", width);
  const int64_t groups = x.numel() / width;
  float* p = x.data_as<float>();
  const float* w = weight.data_as<float>();
  for (int64_t g = 0; g < groups; ++g) {
    float* row = p + g * width;
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += double{row[i]} * double{row[i]};
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / double(width) + eps));
    for (int64_t i = 0; i < width; ++i) row[i] = w[i] * (row[i] * inv);
  }
}

void rms_norm_rows(Tensor& x, const Tensor& weight, double eps) { rms_norm_groups(x, weight, eps, x.size(1)); }

Tensor dense_swiglu(const Tensor& x, const SwigluWeights& weights) {
  Tensor gate = linear(x, weights.gate);  // [T, I]
  const Tensor up = linear(x, weights.up);
  float* g = gate.data_as<float>();
  const float* u = up.data_as<float>();
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const float silu = static_cast<float>(double{g[i]} / (1.0 + std::exp(-double{g[i]})));
    g[i] = silu * u[i];
  }
  return linear(gate, weights.down);  // [T, H]
}

Tensor embedding_rows(const Tensor& table, std::span<const int32_t> ids) {
  const int64_t V = table.size(0), H = table.size(1);
  Tensor out = Tensor::empty(DType::F32, {static_cast<int64_t>(ids.size()), H});  // [n, H]
  std::vector<float> buffer;
  for (size_t i = 0; i < ids.size(); ++i) {
    MOE_CHECK(ids[i] >= 0 && ids[i] < V, "token id {} is outside the vocabulary [0, {})", ids[i], V);
    const float* row = row_f32(table, ids[i], buffer);
    std::copy(row, row + H, out.data_as<float>() + i * H);
  }
  return out;
}

void add_in_place(Tensor& a, const Tensor& b) {
  MOE_CHECK(a.shape() == b.shape() && a.dtype() == DType::F32 && b.dtype() == DType::F32, "add: shapes {} and {}",
            a.shape_string(), b.shape_string());
  float* p = a.data_as<float>();
  const float* q = b.data_as<float>();
  for (int64_t i = 0; i < a.numel(); ++i) p[i] += q[i];
}

}  // namespace moe::model
