// Random weights made on the GPU for `moe bench --random-model`: the fill kernel is a pure function of
// (seed, index) with the asked-for scale, and a model loaded from a generated checkpoint whose tensors are
// already on the device (bf16; norms, biases and routers on the host, as the bench makes them) gives the
// logits of the same weights loaded from the fixture's directory; and the device's token choice. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gpu_skip.h"
#include "checkpoint_layout.h"
#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/device_info.h"
#include "cuda/device_tensor.h"
#include "cuda_decoder_ops.h"
#include "engine/cuda_model.h"
#include "error_of.h"
#include "kv_cache.h"
#include "model_fixture.h"
#include "token_choice.h"

namespace moe::test {
namespace {

// ops->choose_tokens(logits, choices) after the step's begin_step: one new token for each of choices.size()
// sequences of a scratch cache.
std::vector<int32_t> choose_on_gpu(model::DecoderOps& ops, const Tensor& logits,
                                   const std::vector<model::TokenChoice>& choices) {
  const auto n = static_cast<int64_t>(choices.size());
  model::ModelKvCache cache(&ops, 1, n, 16, 1, 1, /*num_blocks=*/0,
                            [&](std::vector<int64_t> s) { return ops.kv_blocks(s); });
  model::BatchLayout batch;
  for (int64_t s = 0; s < n; ++s) {
    cache.reserve(s, 1);
    batch.spans.push_back({.seq = s, .row = s, .count = 1, .start = 0});
    batch.positions.push_back(0);
  }
  batch.total = n;
  const std::vector<int32_t> ids(n, 0);
  ops.begin_step({.batch = batch, .ids = ids, .cache = cache, .last_rows = {}, .choices = choices});
  return ops.choose_tokens(logits, choices);
}

std::vector<float> fill(int64_t n, float stddev, uint64_t seed) {
  Tensor t = cuda::device_empty(DType::F32, {n}, nullptr);
  cuda::fill_uniform(t.data_as<float>(), n, stddev, seed, nullptr);
  std::vector<float> host(n);
  MOE_CUDA_CHECK(cudaMemcpy(host.data(), t.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

TEST(RandomFill, IsSeededAndScaled) {
  MOE_SKIP_WITHOUT_GPU();
  constexpr int64_t n = 1 << 20;
  const std::vector<float> a = fill(n, 0.5f, 7), b = fill(n, 0.5f, 7), c = fill(n, 0.5f, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sum = 0, squares = 0;
  for (const float v : a) {
    sum += v;
    squares += double(v) * v;
    ASSERT_LE(std::abs(v), 0.5f * std::sqrt(3.0f) + 1e-6f);
  }
  EXPECT_NEAR(sum / n, 0.0, 5e-3);
  EXPECT_NEAR(std::sqrt(squares / n), 0.5, 5e-3);
  // A bf16 fill is the fp32 fill rounded.
  Tensor h = cuda::device_empty(DType::BF16, {n}, nullptr);
  cuda::fill_uniform(static_cast<cuda::bf16*>(h.data()), n, 0.5f, 7, nullptr);
  std::vector<cuda::bf16> host(n);
  MOE_CUDA_CHECK(cudaMemcpy(host.data(), h.data(), n * sizeof(cuda::bf16), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(float(host[i]), float(cuda::bf16(a[i]))) << i;
}

class DeviceWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceWeights, LoadAsTheDirectoryDoes) {
  MOE_SKIP_WITHOUT_GPU();
  const std::filesystem::path dir = fixture_dir(GetParam());
  const Checkpoint file = Checkpoint::open(dir);
  const model::ModelConfig config = model::load_model_config(dir);
  const auto maker = [&](const std::string& name, const std::vector<int64_t>& shape) {
    std::string stored = name;
    if (!file.contains(stored)) stored.replace(stored.find("mlp."), 4, "block_sparse_moe.");
    const Tensor t = file.get(stored);
    EXPECT_EQ(t.shape(), shape) << name;
    const bool host = name.ends_with("norm.weight") || name.ends_with(".bias") ||
                      name.ends_with(".mlp.gate.weight") || name.ends_with("shared_expert_gate.weight") ||
                      name.ends_with("e_score_correction_bias");
    return host ? t : cuda::to_device(t, DType::BF16, nullptr);
  };
  const auto generated = engine::load_cuda_causal_lm(
      config,
      Checkpoint::generated("fixture", model::checkpoint_layout(config, model::ExpertTensors::per_expert),
                            maker),
      {});
  const auto from_dir = engine::load_cuda_causal_lm(dir, {});
  const std::vector<std::vector<int32_t>> prompt = {{1, 5, 9, 2, 7, 3}};
  auto cache_a = from_dir->new_cache(1, 8), cache_b = generated->new_cache(1, 8);
  const Tensor a = from_dir->forward(prompt, *cache_a, false),
               b = generated->forward(prompt, *cache_b, false);
  ASSERT_EQ(a.shape(), b.shape());
  const int64_t V = a.size(1);
  for (int64_t r = 0; r < a.size(0); ++r)
    EXPECT_LE(row_rel_error(b.data_as<float>() + r * V, a.data_as<float>() + r * V, V), 1e-6) << "row " << r;
}

// The device's token choice (cuda/sampling.cu) against the host's rule (model/token_choice.cpp) on random
// logits of a full vocabulary: greedy, temperature alone, top-k, top-p and both, at random uniforms.
TEST(DeviceTokenChoice, MatchesTheHostRule) {
  MOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = 20261202;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<model::TokenChoice> kinds = {{},
                                                 {.temperature = 1.0},
                                                 {.temperature = 0.7, .top_k = 50},
                                                 {.temperature = 1.3, .top_p = 0.9},
                                                 {.temperature = 0.8, .top_k = 1000, .top_p = 0.5},
                                                 {.temperature = 2.0, .top_k = 1}};
  const int64_t rows = 48, V = 151936;
  Tensor host = Tensor::empty(DType::F32, {rows, V});
  for (int64_t i = 0; i < host.numel(); ++i) host.data_as<float>()[i] = normal(gen);
  std::vector<model::TokenChoice> choices;
  for (int64_t r = 0; r < rows; ++r) {
    model::TokenChoice c = kinds[r % kinds.size()];
    c.uniform = uniform(gen);
    choices.push_back(c);
  }
  const auto ops = engine::make_cuda_decoder_ops();
  const std::vector<int32_t> ids = choose_on_gpu(*ops, cuda::to_device(host, DType::F32, nullptr), choices);
  ASSERT_EQ(static_cast<int64_t>(ids.size()), rows);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(ids[r],
              model::choose_token({host.data_as<float>() + r * V, static_cast<size_t>(V)}, choices[r]))
        << "row " << r;
}

// A row with NaN or Inf (greedy or sampled) is an error naming the row: the logits never reach the host.
TEST(DeviceTokenChoice, NonFiniteLogitsAreAnError) {
  MOE_SKIP_WITHOUT_GPU();
  const int64_t V = 1000;
  const auto ops = engine::make_cuda_decoder_ops();
  for (const float bad : {std::nanf(""), INFINITY}) {
    for (const double temperature : {0.0, 1.0}) {
      Tensor host = Tensor::zeros(DType::F32, {2, V});
      host.data_as<float>()[V + 17] = bad;  // row 1
      const std::vector<model::TokenChoice> choices(2, {.temperature = temperature, .uniform = 0.5});
      const std::string message =
          error_of([&] { choose_on_gpu(*ops, cuda::to_device(host, DType::F32, nullptr), choices); });
      EXPECT_NE(message.find("not finite (row 1 of the step)"), std::string::npos) << message;
    }
  }
}

// forward_sample on the GPU: greedy is the argmax of the GPU's own logits.
TEST(DeviceTokenChoice, ForwardSampleIsTheArgmaxOfForward) {
  MOE_SKIP_WITHOUT_GPU();
  const auto lm = engine::load_cuda_causal_lm(fixture_dir("qwen3_moe"), {});
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {4, 2}, {7}};
  auto a = lm->new_cache(3, 8), b = lm->new_cache(3, 8);
  const Tensor logits = lm->forward(prompts, *a, true);  // [3, V]
  const std::vector<int32_t> ids = lm->forward_sample(prompts, *b, std::vector<model::TokenChoice>(3));
  ASSERT_EQ(ids.size(), 3u);
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_EQ(ids[r], argmax(logits.data_as<float>() + r * logits.size(1), logits.size(1)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeviceWeights, ::testing::ValuesIn(fixture_families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moe::test
