#include "cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/float_convert.h"

namespace moe::cpu {

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

}  // namespace

Tensor embedding(const Tensor& table, std::span<const int32_t> ids) {
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

Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous(), "gather_rows expects contiguous F32 rows");
  const int64_t T = x.size(0), H = x.size(1);
  Tensor out = Tensor::empty(DType::F32, {static_cast<int64_t>(rows.size()), H});  // [n, H]
  for (size_t i = 0; i < rows.size(); ++i) {
    MOE_CHECK(rows[i] >= 0 && rows[i] < T, "gather_rows: row {} is outside [0, {})", rows[i], T);
    std::memcpy(out.data_as<float>() + i * H, x.data_as<float>() + rows[i] * H, H * sizeof(float));
  }
  return out;
}

}  // namespace moe::cpu
