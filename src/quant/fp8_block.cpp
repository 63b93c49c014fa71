#include "moe/quant/fp8_block.h"

#include <algorithm>
#include <cmath>

#include "core/float_convert.h"
#include "core/thread_pool.h"

namespace moe::quant {

namespace {

int64_t blocks(int64_t extent, int64_t block) { return (extent + block - 1) / block; }

// Leading dimensions (all but the last two) of a weight, multiplied out.
int64_t leading(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d + 2 < t.dim(); ++d) n *= t.size(d);
  return n;
}

std::vector<int64_t> scale_shape(const Tensor& w, Fp8BlockShape block) {
  std::vector<int64_t> shape(w.shape().begin(), w.shape().end() - 2);
  shape.push_back(blocks(w.size(-2), block.n));
  shape.push_back(blocks(w.size(-1), block.k));
  return shape;
}

void check_block(Fp8BlockShape block) {
  MOE_CHECK(block.n > 0 && block.k > 0, "fp8 weight_block_size [{}, {}] must be two positive sizes", block.n,
            block.k);
}

}  // namespace

uint8_t fp8_e4m3_saturate(float x) { return f32_to_fp8_e4m3(std::isnan(x) ? x : std::clamp(x, -kFp8E4m3Max, kFp8E4m3Max)); }

Fp8BlockWeight quantize_fp8_block(const Tensor& w, Fp8BlockShape block) {
  check_block(block);
  MOE_CHECK(w.dim() >= 2 && dtype_is_float(w.dtype()), "fp8 quantisation needs a float weight of rank >= 2, got {} {}",
            dtype_name(w.dtype()), w.shape_string());
  const Tensor src = w.to_f32();  // contiguous
  const int64_t N = w.size(-2), K = w.size(-1), nb = blocks(N, block.n), kb = blocks(K, block.k);
  Fp8BlockWeight q{.values = Tensor::empty(DType::F8_E4M3, w.shape()), .scale_inv = Tensor::empty(DType::F32, scale_shape(w, block))};
  const float* x = src.data_as<float>();
  uint8_t* v = q.values.data_as<uint8_t>();
  float* s = q.scale_inv.data_as<float>();
  for (int64_t m = 0; m < leading(w); ++m, x += N * K, v += N * K, s += nb * kb) {
    for (int64_t bi = 0; bi < nb; ++bi) {
      for (int64_t bj = 0; bj < kb; ++bj) {
        const int64_t r0 = bi * block.n, r1 = std::min(N, r0 + block.n), c0 = bj * block.k, c1 = std::min(K, c0 + block.k);
        float amax = 0;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * K + c]));
        MOE_CHECK(std::isfinite(amax), "cannot quantise a weight with a non-finite value (block [{}, {}])", bi, bj);
        const float scale = amax > 0 ? amax / kFp8E4m3Max : 1.0f;
        s[bi * kb + bj] = scale;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) v[r * K + c] = fp8_e4m3_saturate(x[r * K + c] / scale);
      }
    }
  }
  return q;
}

void check_fp8_block(const Tensor& values, const Tensor& scale_inv, Fp8BlockShape block, const std::string& name) {
  check_block(block);
  MOE_CHECK(values.dtype() == DType::F8_E4M3 && values.dim() >= 2, "tensor '{}' is {} {}: an fp8 weight is F8_E4M3 of "
            "rank 2 (or 3 for fused experts)", name, dtype_name(values.dtype()), values.shape_string());
  MOE_CHECK(scale_inv.dtype() == DType::F32 || scale_inv.dtype() == DType::BF16 || scale_inv.dtype() == DType::F16,
            "the scales of '{}' are {}: expected F32 (one per {}x{} block)", name, dtype_name(scale_inv.dtype()),
            block.n, block.k);
  const std::vector<int64_t> expected = scale_shape(values, block);
  // NOTE: transformers saves the scale of a matrix that is one block as a scalar ([] for [1, 1]): scales of
  // lower rank whose dimensions are the expected ones less some of size 1 are accepted (they index alike).
  const auto squeezed = [](std::vector<int64_t> shape) {
    std::erase(shape, int64_t{1});
    return shape;
  };
  MOE_CHECK(scale_inv.shape() == expected || (scale_inv.dim() < static_cast<int>(expected.size()) &&
                                              squeezed(scale_inv.shape()) == squeezed(expected)),
            "the scales of '{}' have shape {}, expected {}: one per {}x{} block of its {} values (does "
            "quantization_config.weight_block_size match the checkpoint?)",
            name, scale_inv.shape_string(), shape_to_string(expected), block.n, block.k, values.shape_string());
  const Tensor s = scale_inv.to_f32();
  const float* p = s.data_as<float>();
  for (int64_t i = 0; i < s.numel(); ++i)
    MOE_CHECK(std::isfinite(p[i]) && p[i] > 0, "the scales of '{}' hold {} at flat index {}: every block scale must be "
              "finite and > 0 (a corrupt or wrongly converted checkpoint)", name, p[i], i);
}

Tensor dequantize_fp8_block(const Tensor& values, const Tensor& scale_inv, Fp8BlockShape block, DType out,
                            const std::string& name) {
  check_fp8_block(values, scale_inv, block, name);
  MOE_CHECK(out == DType::F32 || out == DType::BF16, "fp8 weights dequantise to F32 or BF16, not {}", dtype_name(out));
  const Tensor v_src = values.to(DType::F8_E4M3), s_src = scale_inv.to_f32();  // contiguous
  const int64_t N = values.size(-2), K = values.size(-1), nb = blocks(N, block.n), kb = blocks(K, block.k);
  Tensor w = Tensor::empty(out, values.shape());
  const uint8_t* v = v_src.data_as<uint8_t>();
  const float* s = s_src.data_as<float>();
  // NOTE: in parallel over rows: a checkpoint the size of DeepSeek-V3's is dequantised here at load.
  float* w_f32 = out == DType::F32 ? w.data_as<float>() : nullptr;
  uint16_t* w_bf16 = out == DType::BF16 ? w.data_as<uint16_t>() : nullptr;
  ThreadPool::global().parallel_for(leading(values) * N, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t i = begin; i < end; ++i) {  // i = m * N + r
      const float* scales = s + ((i / N) * nb + (i % N) / block.n) * kb;
      const uint8_t* src = v + i * K;
      for (int64_t c = 0; c < K; ++c) row[c] = fp8_e4m3_to_f32(src[c]) * scales[c / block.k];
      if (w_f32) std::copy(row.begin(), row.end(), w_f32 + i * K);
      else convert_from_f32(row.data(), w_bf16 + i * K, DType::BF16, K);
    }
  });
  return w;
}

Fp8Activations quantize_fp8_activations(const Tensor& x, int64_t group) {
  MOE_CHECK(x.dim() == 2 && group > 0, "fp8 activations: x must be [T, K] and the group > 0, got {} and {}",
            x.shape_string(), group);
  const Tensor src = x.to_f32();
  const int64_t T = x.size(0), K = x.size(1), g = blocks(K, group);
  Fp8Activations a{.values = Tensor::empty(DType::F8_E4M3, {T, K}), .scales = Tensor::empty(DType::F32, {T, g})};
  for (int64_t t = 0; t < T; ++t) {
    const float* row = src.data_as<float>() + t * K;
    for (int64_t j = 0; j < g; ++j) {
      const int64_t c0 = j * group, c1 = std::min(K, c0 + group);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
      const float scale = amax > 0 ? amax / kFp8E4m3Max : 1.0f;
      a.scales.data_as<float>()[t * g + j] = scale;
      for (int64_t c = c0; c < c1; ++c) a.values.data_as<uint8_t>()[t * K + c] = fp8_e4m3_saturate(row[c] / scale);
    }
  }
  return a;
}

Tensor dequantize_fp8_activations(const Fp8Activations& a, int64_t group) {
  const int64_t T = a.values.size(0), K = a.values.size(1), g = a.scales.size(1);
  Tensor x = Tensor::empty(DType::F32, {T, K});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < K; ++c)
      x.data_as<float>()[t * K + c] =
          fp8_e4m3_to_f32(a.values.data_as<uint8_t>()[t * K + c]) * a.scales.data_as<float>()[t * g + c / group];
  return x;
}

}  // namespace moe::quant
