#include "moe/layer/random_weights.h"

#include <cmath>
#include <vector>

#include "core/float_convert.h"
#include "core/thread_pool.h"

namespace moe {

namespace {

// splitmix64: a tiny counter-based generator, so every element is a pure function of (seed, index).
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

SwigluWeights random_mlp(int64_t H, int64_t I, uint64_t seed, DType dtype) {
  return {.gate = random_tensor({I, H}, 1.0f / std::sqrt(float(H)), seed + 1, dtype),
          .up = random_tensor({I, H}, 1.0f / std::sqrt(float(H)), seed + 2, dtype),
          .down = random_tensor({H, I}, 1.0f / std::sqrt(float(I)), seed + 3, dtype)};
}

}  // namespace

Tensor random_tensor(std::vector<int64_t> shape, float stddev, uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  const float half_width = stddev * std::sqrt(3.0f);  // uniform(-a, a) has stddev a / sqrt(3)
  const uint64_t base = splitmix64(seed);
  constexpr int64_t kChunk = 1 << 14;
  ThreadPool::global().parallel_for((t.numel() + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> values(kChunk);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t begin = c * kChunk, n = std::min(kChunk, t.numel() - begin);
      for (int64_t i = 0; i < n; ++i) {
        const double u = double(splitmix64(base ^ uint64_t(begin + i)) >> 11) * 0x1.0p-53;  // [0, 1)
        values[i] = static_cast<float>((2.0 * u - 1.0) * half_width);
      }
      convert_from_f32(values.data(), static_cast<char*>(t.data()) + begin * int64_t(dtype_size(dtype)), dtype,
                       static_cast<size_t>(n));
    }
  });
  return t;
}

MoeWeights random_moe_weights(const MoeConfig& c, uint64_t seed, DType dtype, float router_scale) {
  const int64_t H = c.hidden_size, I = c.expert_intermediate_size, E = c.router.n_experts;
  MoeWeights w;
  w.router = random_tensor({E, H}, router_scale / std::sqrt(float(H)), splitmix64(seed), DType::F32);
  if (c.router_has_correction_bias) w.correction_bias = random_tensor({E}, 0.02f, splitmix64(seed + 1));
  for (int64_t e = 0; e < E; ++e) w.experts.push_back(random_mlp(H, I, splitmix64(seed + 16 * (e + 1)), dtype));
  if (c.shared != SharedExpertKind::none)
    w.shared = random_mlp(H, c.shared_intermediate_size, splitmix64(seed + 7), dtype);
  if (c.shared == SharedExpertKind::sigmoid_gated)
    w.shared_gate = random_tensor({1, H}, 1.0f / std::sqrt(float(H)), splitmix64(seed + 9), dtype);
  return w;
}

}  // namespace moe
