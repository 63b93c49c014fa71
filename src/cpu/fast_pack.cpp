// Repacking of SwiGLU weights into the fast kernels' layout (fast_kernels.h), once at load time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "dot.h"
#include "fast_kernels.h"
#include "moe/core/safetensors.h"
#include "core/thread_pool.h"

namespace moe::cpu {

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Where row `r` of a block of a packed matrix comes from: a weight row, or nothing (zero padding).
struct RowSource {
  const Tensor* tensor;  // null: a zero row
  int64_t row;
};

// Fills one packed matrix of n_blocks blocks of 64 rows and reduction length k (padded to k_pad).
template <class RowOf>
PackedMatrix pack_matrix(int64_t n_blocks, int64_t k, int64_t k_pad, quant::WeightFormat format, const RowOf& row_of) {
  PackedMatrix m;
  m.n_blocks = n_blocks;
  m.k_pad = k_pad;
  const int64_t n_rows = n_blocks * kBlockRows;
  const int64_t n_elements = checked_mul(n_rows, k_pad, "packed expert");
  std::vector<float> row(k_pad, 0.0f);
  if (format == quant::WeightFormat::bf16) {
    m.data = Tensor::zeros(DType::BF16, {n_elements});
    uint16_t* dst = static_cast<uint16_t*>(m.data.data());
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int r = 0; r < kBlockRows; ++r) {
        const RowSource src = row_of(b, r);
        if (!src.tensor) continue;
        weight_row_f32(*src.tensor, src.row, row.data());
        uint16_t* block = dst + b * kBlockRows * k_pad;
        for (int64_t i = 0; i < k; ++i) block[(i / 2 * kBlockRows + r) * 2 + i % 2] = f32_to_bf16(row[i]);
      }
    return m;
  }
  // int8: symmetric per output row, from the bf16-rounded values (the same weights the bf16 path runs).
  // NOTE: the compensation 128 * sum(q) of a row is an int32 with |q| <= 127, which bounds k.
  constexpr int64_t kMaxInt8K = std::numeric_limits<int32_t>::max() / (128 * 127);
  MOE_CHECK(k <= kMaxInt8K, "int8 weights support reduction lengths up to {} (the int32 row sums), got {}: use "
            "the bf16 weight format", kMaxInt8K, k);
  m.data = Tensor::zeros(DType::I8, {n_elements});
  m.scale.assign(n_rows, 0.0f);
  m.comp.assign(n_rows, 0);
  int8_t* dst = static_cast<int8_t*>(m.data.data());
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int r = 0; r < kBlockRows; ++r) {
      const RowSource src = row_of(b, r);
      if (!src.tensor) continue;
      weight_row_f32(*src.tensor, src.row, row.data());
      float amax = 0.0f;
      bool nan = false;  // (std::max skips a NaN)
      for (int64_t i = 0; i < k; ++i) {
        row[i] = bf16_to_f32(f32_to_bf16(row[i]));
        amax = std::max(amax, std::fabs(row[i]));
        nan |= row[i] != row[i];
      }
      // NOTE: NaN or Inf has no int8 value (converting it is undefined behaviour): a corrupt checkpoint.
      MOE_CHECK(std::isfinite(amax) && !nan, "a weight row ({} values) holds NaN or Inf: the checkpoint is corrupt", k);
      const float scale = amax / 127.0f;
      // NOTE: a row of subnormals (amax < 127 / FLT_MAX) makes 127 / amax infinite and 0 * inf a NaN: such a
      // row quantises to zeros.
      const float inverse = amax > 0.0f && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      int8_t* block = dst + b * kBlockRows * k_pad;
      for (int64_t i = 0; i < k; ++i) {
        const auto q = static_cast<int32_t>(std::clamp(std::nearbyint(row[i] * inverse), -127.0f, 127.0f));
        block[(i / 4 * kBlockRows + r) * 4 + i % 4] = static_cast<int8_t>(q);
        sum += q;
      }
      m.scale[b * kBlockRows + r] = scale;
      m.comp[b * kBlockRows + r] = 128 * sum;
    }
  return m;
}

void check_weights(const SwigluWeights& w) {
  MOE_CHECK(w.gate.dim() == 2 && w.up.shape() == w.gate.shape() && w.down.dim() == 2 &&
                w.down.size(0) == w.gate.size(1) && w.down.size(1) == w.gate.size(0),
            "SwiGLU weights gate {} up {} down {} do not fit together", w.gate.shape_string(), w.up.shape_string(),
            w.down.shape_string());
  for (const Tensor* t : {&w.gate, &w.up, &w.down})
    MOE_CHECK(t->strides()[1] == 1 && (t->dtype() == DType::F32 || t->dtype() == DType::BF16 || t->dtype() == DType::F16),
              "fast CPU experts take F32, BF16 or F16 weights with contiguous rows, got {}", dtype_name(t->dtype()));
}

}  // namespace


PackedExpertPtr pack_expert(const SwigluWeights& w, quant::WeightFormat format) {
  check_weights(w);
  auto e = std::make_shared<PackedExpert>();
  e->format = format;
  e->hidden = w.gate.size(1);
  e->intermediate = w.gate.size(0);
  e->hidden_pad = round_up(e->hidden, kBlockRows);
  // NOTE: 64, not the gate_up block's 32: the down projection's k then runs in whole AMX steps (16 int8
  // quads, 32 bf16 pairs); real models' intermediate sizes are multiples of 64 anyway.
  e->intermediate_pad = round_up(e->intermediate, 2 * kGateUpCols);
  const int64_t H = e->hidden, I = e->intermediate;
  e->gate_up = pack_matrix(e->intermediate_pad / kGateUpCols, H, e->hidden_pad, format, [&](int64_t b, int r) {
    const int64_t i = b * kGateUpCols + r % kGateUpCols;
    if (i >= I) return RowSource{nullptr, 0};
    return RowSource{r < kGateUpCols ? &w.gate : &w.up, i};
  });
  e->down = pack_matrix(e->hidden_pad / kBlockRows, I, e->intermediate_pad, format, [&](int64_t b, int r) {
    const int64_t h = b * kBlockRows + r;
    return h < H ? RowSource{&w.down, h} : RowSource{nullptr, 0};
  });
  return e;
}

std::vector<PackedExpertPtr> pack_experts(std::span<const SwigluWeights> experts, quant::WeightFormat format) {
  const int64_t n = static_cast<int64_t>(experts.size());
  // NOTE: experts that are views of the same memory (benchmarks alias experts to bound their footprint)
  // share one packed copy, so that packing preserves what is and is not distinct memory.
  using Key = std::tuple<const void*, const void*, const void*>;
  std::map<Key, int64_t> first;
  std::vector<int64_t> source(n);
  for (int64_t e = 0; e < n; ++e) {
    const Key key{experts[e].gate.data(), experts[e].up.data(), experts[e].down.data()};
    source[e] = first.emplace(key, e).first->second;
  }
  std::vector<PackedExpertPtr> packed(n);
  ThreadPool::global().parallel_for(n, 1, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e)
      if (source[e] == e) {
        packed[e] = pack_expert(experts[e], format);
        // NOTE: the packed copy is what runs; the checkpoint's pages of this expert need not stay resident.
        for (const Tensor* t : {&experts[e].gate, &experts[e].up, &experts[e].down}) release_mapped_pages(*t);
      }
  });
  for (int64_t e = 0; e < n; ++e) packed[e] = packed[source[e]];
  return packed;
}

int64_t packed_weight_bytes(const PackedExpert& e) {
  const int64_t element = e.format == quant::WeightFormat::bf16 ? 2 : 1;
  return 3 * e.hidden * e.intermediate * element;
}

}  // namespace moe::cpu
