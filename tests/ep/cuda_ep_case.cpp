#include "cuda_ep_case.h"

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"
#include "device_layer.h"
#include "cuda/device_buffer.h"
#include "moe/layer/random_weights.h"

namespace moe::ep {

uint64_t shared_seed() {
  int64_t seed[1] = {g_host->rank() == 0 ? static_cast<int64_t>(test::fresh_seed() >> 1) : 0};
  g_host->allreduce_sum(seed);
  return static_cast<uint64_t>(seed[0]);
}

GpuBlock make_gpu_block(const std::string& type, int64_t T, test::TestRng& rng, int E, int k, int64_t I) {
  GpuBlock b;
  b.config = parse_moe_config(test::cuda_case_config(type, 256, I, E, k));
  b.weights = random_moe_weights(b.config, rng.engine()(), DType::BF16, 4.0f);
  b.x = rng.normal_tensor({T, 256}).to(DType::BF16).to_f32();
  return b;
}

LayerOutput single_gpu(const GpuBlock& b) {
  const int64_t T = b.x.size(0), H = b.config.hidden_size, k = b.config.router.top_k;
  MoeLayer layer = test::cuda_layer(b.config, b.weights, {.max_tokens = T});
  const Tensor xb = b.x.to(DType::BF16);
  cuda::DeviceBuffer<uint16_t> d_x(T * H);
  d_x.upload(xb.data_as<uint16_t>(), T * H);
  cuda::DeviceBuffer<float> d_out(T * H), d_weights(T * k);
  cuda::DeviceBuffer<int32_t> d_ids(T * k);
  test::forward_on_device(layer, d_x.get(), T, d_out.get(), d_ids.get(), d_weights.get(), nullptr);
  LayerOutput out;
  out.hidden_states = Tensor::empty(DType::F32, {T, H});
  out.topk.ids = Tensor::empty(DType::I32, {T, k});
  MOE_CUDA_CHECK(cudaMemcpy(out.hidden_states.data(), d_out.get(), out.hidden_states.nbytes(), cudaMemcpyDeviceToHost));
  MOE_CUDA_CHECK(cudaMemcpy(out.topk.ids.data(), d_ids.get(), out.topk.ids.nbytes(), cudaMemcpyDeviceToHost));
  return out;
}

Compared compare(const LayerOutput& ep, const LayerOutput& ref) {
  const int64_t T = ref.hidden_states.size(0), H = ref.hidden_states.size(1), k = ref.topk.ids.size(1);
  Compared c;
  double worst = 0, scale = 1e-30, diff2 = 0, ref2 = 1e-30;
  const float* a = ep.hidden_states.data_as<float>();
  const float* b = ref.hidden_states.data_as<float>();
  for (int64_t t = 0; t < T; ++t) {
    bool same = true;
    for (int64_t j = 0; j < k; ++j)
      same &= ep.topk.ids.data_as<int32_t>()[t * k + j] == ref.topk.ids.data_as<int32_t>()[t * k + j];
    c.same_choices += same;
    for (int64_t h = 0; h < H; ++h) {
      EXPECT_FALSE(std::isnan(a[t * H + h])) << "token " << t;
      scale = std::max(scale, std::fabs(double(b[t * H + h])));
      if (!same) continue;
      const double d = double(a[t * H + h]) - b[t * H + h];
      worst = std::max(worst, std::fabs(d));
      diff2 += d * d;
      ref2 += double(b[t * H + h]) * b[t * H + h];
    }
  }
  c.max_rel = worst / scale;
  c.normwise = std::sqrt(diff2 / ref2);
  return c;
}

}  // namespace moe::ep
