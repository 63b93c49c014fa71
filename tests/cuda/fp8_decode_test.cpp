// FP8 experts on the GPU: the device block quantiser (fp8_block.cu) against quant/fp8_block's, bit for bit;
// the fused decode path streaming them (decode.cu's FP8 variant) against the CPU layer on the same fp8
// weights dequantised; non-finite weights refused.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "device_layer.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"
#include "moe/quant/fp8_block.h"
#include "scoped_env.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

constexpr quant::Fp8BlockShape kBlock{.n = 128, .k = 128};

// w [N, K] through quant/fp8_block (the format's oracle): the weight the fp8 kernels compute with, in fp32.
Tensor fp8_round_trip(const Tensor& w) {
  const quant::Fp8BlockWeight q = quant::quantize_fp8_block(w, kBlock);
  return quant::dequantize_fp8_block(q.values, q.scale_inv, kBlock, DType::F32, "test weight");
}

MoeWeights fp8_round_trip(const MoeWeights& w) {
  MoeWeights out = w;
  const auto mlp = [](const SwigluWeights& m) {
    return SwigluWeights{
        .gate = fp8_round_trip(m.gate), .up = fp8_round_trip(m.up), .down = fp8_round_trip(m.down)};
  };
  for (size_t e = 0; e < w.experts.size(); ++e) out.experts[e] = mlp(w.experts[e]);
  if (w.shared.gate.defined()) out.shared = mlp(w.shared);
  return out;
}

TEST(Fp8Block, DeviceQuantiserMatchesTheCpuBitForBit) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const int64_t mats = 3, rows = 200, cols = 320;  // partial blocks at both edges
  Tensor w = rng.normal_tensor({mats, rows, cols}, 3.0f, DType::BF16);
  uint16_t* bits = w.data_as<uint16_t>();
  for (int64_t r = 128; r < rows; ++r)
    std::fill_n(bits + r * cols + 256, cols - 256, uint16_t{0});  // a zero block
  bits[5] = 0x4300;  // 128.0: the largest value of its block, which sets the block's scale
  const quant::Fp8BlockWeight want = quant::quantize_fp8_block(w, kBlock);

  test::Device<uint16_t> d_w(std::vector<uint16_t>(bits, bits + w.numel()));
  test::Device<uint8_t> d_values(w.numel());
  test::Device<float> d_scales(want.scale_inv.numel());
  test::Device<int> d_bad(std::vector<int>{0});
  quantize_fp8_block(reinterpret_cast<const bf16*>(d_w.get()), mats, rows, cols, d_values.get(),
                     d_scales.get(), d_bad.get(), nullptr);
  const auto values = d_values.host();
  const auto scales = d_scales.host();
  EXPECT_EQ(d_bad.host()[0], 0);
  ASSERT_EQ(std::memcmp(values.data(), want.values.data(), values.size()), 0) << "e4m3 values differ";
  for (int64_t i = 0; i < want.scale_inv.numel(); ++i)
    ASSERT_EQ(scales[i], want.scale_inv.data_as<float>()[i]) << "scale " << i;
  EXPECT_EQ(scales[(0 * 2 + 1) * 3 + 2], 1.0f) << "an all-zero block has scale 1";
}

TEST(Fp8Block, NonFiniteExpertWeightIsAnError) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::ScopedEnv limit("MOE_DECODE_MAX_TOKENS", "2");
  MoeConfig config = parse_moe_config(test::cuda_case_config("qwen3_moe", 256, 128, 8, 2));
  config.quant.method = quant::QuantMethod::fp8_block;
  MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
  Tensor down = weights.experts[5].down.to(DType::F32);
  down.data_as<float>()[77] = std::numeric_limits<float>::quiet_NaN();
  weights.experts[5].down = down;
  try {
    test::cuda_layer(config, weights, {.max_tokens = 2});
    FAIL() << "a NaN expert weight must be refused";
  } catch (const moe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN or an Inf"), std::string::npos) << e.what();
  }
}

// The CPU layer on the fp8 weights (dequantised) is the reference; activations are bf16 in both (x, and
// silu(gate) * up between the GEMVs), so the tolerance is the bf16 decode path's: 1e-2 of the largest output.
// The fp8 rounding of the weights moves the outputs by several times that, so a kernel that read the bf16
// experts instead would fail.
TEST(CudaDecodeFp8, MatchesTheCpuLayerOnTheDequantisedWeights) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::ScopedEnv limit("MOE_DECODE_MAX_TOKENS", "8");
  struct Case {
    const char* type;
    int64_t H, I;
    int E, k;
  };
  for (Case c : {Case{"qwen3_moe", 512, 128, 32, 4}, Case{"deepseek_v3", 2304, 1088, 32, 4},
                 Case{"qwen2_moe", 4608, 192, 16, 2}, Case{"mixtral", 2048, 2112, 8, 2}}) {
    MoeConfig config = parse_moe_config(test::cuda_case_config(c.type, c.H, c.I, c.E, c.k));
    const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
    const MoeWeights dequantised = fp8_round_trip(weights);
    MoeLayer cpu_fp8(config, dequantised), cpu_bf16(config, weights);
    config.quant.method = quant::QuantMethod::fp8_block;
    const int64_t H = c.H, k = c.k, Tm = 8;
    MoeLayer gpu = test::cuda_layer(config, weights, {.max_tokens = Tm});
    ASSERT_EQ(gpu.describe_path(1), "fused decode kernel, fp8 experts");
    for (int64_t T : {1, 2, 5, 8}) {
      SCOPED_TRACE(std::string(c.type) + " H " + std::to_string(H) + " T " + std::to_string(T));
      const Tensor xb = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
      const LayerOutput want = cpu_fp8.forward(xb.to_f32()), bf16_out = cpu_bf16.forward(xb.to_f32());
      test::Device<uint16_t> d_x(
          std::vector<uint16_t>(xb.data_as<uint16_t>(), xb.data_as<uint16_t>() + T * H));
      test::Device<float> d_out(T * H), d_weights(T * k);
      test::Device<int32_t> d_ids(T * k);
      MOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, T * H * sizeof(float)));  // NaN: unwritten outputs show
      test::forward_on_device(gpu, d_x.get(), T, d_out.get(), d_ids.get(), d_weights.get(), nullptr);
      const auto out = d_out.host();
      const auto ids = d_ids.host();
      for (int64_t i = 0; i < T * k; ++i)
        ASSERT_EQ(ids[i], want.topk.ids.data_as<int32_t>()[i]) << "token " << i / k << " choice " << i % k;
      const double error = test::max_relative_error(out, want.hidden_states);
      EXPECT_LE(error, 1e-2);
      const Tensor& b = bf16_out.hidden_states;
      const double fp8_shift = test::max_relative_error(
          std::vector<float>(b.data_as<float>(), b.data_as<float>() + T * H), want.hidden_states);
      EXPECT_GT(fp8_shift, 3 * error) << "the fp8 weights must be what the kernel reads";
    }
  }
}

}  // namespace
}  // namespace moe::cuda
