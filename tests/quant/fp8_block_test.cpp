// FP8 e4m3 block-scaled weights and activations against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/float_convert.h"
#include "moe/quant/fp8_block.h"
#include "error_of.h"
#include "test_random.h"

namespace moe::quant {
namespace {

using test::error_of;

TEST(Fp8E4m3, SaturatesAndKeepsNan) {
  EXPECT_EQ(fp8_e4m3_saturate(448.0f), 0x7e);  // S.1111.110: the largest finite value
  EXPECT_EQ(fp8_e4m3_saturate(500.0f), 0x7e);  // would be NaN unclamped (>= 480)
  EXPECT_EQ(fp8_e4m3_saturate(-1e30f), 0xfe);
  EXPECT_EQ(fp8_e4m3_saturate(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(fp8_e4m3_saturate(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_EQ(fp8_e4m3_saturate(1.0f), 0x38);          // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(fp8_e4m3_saturate(0x1.0p-9f), 0x01);     // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_saturate(0x1.0p-10f), 0x00);    // half of it: ties to even (zero)
  EXPECT_EQ(fp8_e4m3_saturate(1.0625f), 0x38);       // halfway between 1 and 1.125: to even
  EXPECT_EQ(fp8_e4m3_saturate(1.1875f), 0x3a);       // halfway between 1.125 and 1.25: to even (1.25)
}

TEST(Fp8E4m3, EveryCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(fp8_e4m3_saturate(v), b) << b;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0x1.0p-6f);  // the smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * 0x1.0p-9f);
}

TEST(Fp8Block, QuantisesPerBlockByHand) {
  // [2, 3] with blocks of 1 x 2: block (0,0) amax 2, (0,1) amax 4, (1,0) all zero, (1,1) amax 0.5.
  const Tensor w = Tensor::from_f32({2, 3}, std::vector<float>{1, -2, 4, 0, 0, 0.5f});
  const Fp8BlockWeight q = quantize_fp8_block(w, {.n = 1, .k = 2});
  ASSERT_EQ(q.scale_inv.shape(), (std::vector<int64_t>{2, 2}));
  const float* s = q.scale_inv.data_as<float>();
  EXPECT_EQ(s[0], 2.0f / 448.0f);
  EXPECT_EQ(s[1], 4.0f / 448.0f);
  EXPECT_EQ(s[2], 1.0f);  // an all-zero block keeps scale 1
  EXPECT_EQ(s[3], 0.5f / 448.0f);
  const uint8_t* v = q.values.data_as<uint8_t>();
  EXPECT_EQ(fp8_e4m3_to_f32(v[0]), 224.0f);  // 1 / (2/448)
  EXPECT_EQ(v[1], 0xfe);                     // -448
  EXPECT_EQ(v[2], 0x7e);                     // 448
  EXPECT_EQ(v[3], 0x00);
  EXPECT_EQ(v[5], 0x7e);

  const Tensor back = dequantize_fp8_block(q.values, q.scale_inv, {.n = 1, .k = 2}, DType::F32, "w");
  const std::vector<float> want{1, -2, 4, 0, 0, 0.5f};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(back.data_as<float>()[i], want[i]) << i;
}

TEST(Fp8Block, PartialEdgeBlocksAndFusedExperts) {
  test::TestRng rng;
  const Tensor w = rng.normal_tensor({3, 130, 200}, 0.05f);  // [E, N, K]: blocks of 128 leave partial edges
  const Fp8BlockWeight q = quantize_fp8_block(w, {});
  EXPECT_EQ(q.scale_inv.shape(), (std::vector<int64_t>{3, 2, 2}));
  const Tensor back = dequantize_fp8_block(q.values, q.scale_inv, {}, DType::F32, "experts.gate_up_proj");
  // e4m3 keeps 3 mantissa bits: each value within 2^-4 relative, or within the block's subnormal step.
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t r = 0; r < 130; ++r)
      for (int64_t c = 0; c < 200; ++c) {
        const int64_t i = (e * 130 + r) * 200 + c;
        const float x = w.data_as<float>()[i], y = back.data_as<float>()[i];
        const float scale = q.scale_inv.data_as<float>()[(e * 2 + r / 128) * 2 + c / 128];
        EXPECT_LE(std::fabs(x - y), std::max(std::fabs(x) * 0x1.0p-4f, scale * 0x1.0p-9f)) << i;
      }
  const Tensor bf16 = dequantize_fp8_block(q.values, q.scale_inv, {}, DType::BF16, "x");
  EXPECT_EQ(bf16.dtype(), DType::BF16);
  EXPECT_EQ(bf16_to_f32(bf16.data_as<uint16_t>()[7]), bf16_to_f32(f32_to_bf16(back.data_as<float>()[7])));
}

TEST(Fp8Block, BadScalesNameTheTensor) {
  const Tensor w = Tensor::from_f32({4, 4}, std::vector<float>(16, 1.0f));
  const Fp8BlockWeight q = quantize_fp8_block(w, {.n = 2, .k = 2});
  const auto dequant = [&](const Tensor& scales, Fp8BlockShape block) {
    return error_of([&] { dequantize_fp8_block(q.values, scales, block, DType::BF16, "layers.1.up_proj.weight"); });
  };
  const std::string shape = dequant(Tensor::from_f32({2, 1}, std::vector<float>{1, 1}), {.n = 2, .k = 2});
  EXPECT_NE(shape.find("'layers.1.up_proj.weight'"), std::string::npos) << shape;
  EXPECT_NE(shape.find("expected [2, 2]"), std::string::npos) << shape;
  // The scales of 2x2 blocks read with a 128x128 block size: a mismatched block size.
  const std::string block = dequant(q.scale_inv, {});
  EXPECT_NE(block.find("weight_block_size"), std::string::npos) << block;
  const std::string nan = dequant(Tensor::from_f32({2, 2}, std::vector<float>{1, std::nanf(""), 1, 1}), {.n = 2, .k = 2});
  EXPECT_NE(nan.find("finite and > 0"), std::string::npos) << nan;
  const std::string zero = dequant(Tensor::from_f32({2, 2}, std::vector<float>{1, 1, 0, 1}), {.n = 2, .k = 2});
  EXPECT_NE(zero.find("flat index 2"), std::string::npos) << zero;
  const std::string not_fp8 = error_of([&] { check_fp8_block(w, q.scale_inv, {.n = 2, .k = 2}, "x.weight"); });
  EXPECT_NE(not_fp8.find("F8_E4M3"), std::string::npos) << not_fp8;
}

// transformers saves a one-block matrix's scale as a scalar: it reads as the [1, 1] it stands for; a scalar
// for a matrix of several blocks is still an error.
TEST(Fp8Block, OneBlockScaleSavedAsAScalar) {
  const Tensor w = Tensor::from_f32({2, 2}, std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f});
  const Fp8BlockWeight q = quantize_fp8_block(w, {.n = 2, .k = 2});
  Tensor scalar = Tensor::empty(DType::F32, {});
  scalar.data_as<float>()[0] = q.scale_inv.data_as<float>()[0];
  const Tensor want = dequantize_fp8_block(q.values, q.scale_inv, {.n = 2, .k = 2}, DType::F32, "w");
  const Tensor got = dequantize_fp8_block(q.values, scalar, {.n = 2, .k = 2}, DType::F32, "w");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.data_as<float>()[i], want.data_as<float>()[i]) << i;
  const std::string several =
      error_of([&] { dequantize_fp8_block(q.values, scalar, {.n = 1, .k = 2}, DType::F32, "w"); });
  EXPECT_NE(several.find("expected [2, 1]"), std::string::npos) << several;
}

TEST(Fp8Activations, PerTokenGroupsOfAmaxOver448) {
  // One token, K = 4 in groups of 2: amax 3 and 0 (an all-zero group keeps scale 1).
  const Tensor x = Tensor::from_f32({1, 4}, std::vector<float>{-3, 1.5f, 0, 0});
  const Fp8Activations a = quantize_fp8_activations(x, 2);
  EXPECT_EQ(a.scales.data_as<float>()[0], 3.0f / 448.0f);
  EXPECT_EQ(a.scales.data_as<float>()[1], 1.0f);
  EXPECT_EQ(a.values.data_as<uint8_t>()[0], 0xfe);
  EXPECT_EQ(fp8_e4m3_to_f32(a.values.data_as<uint8_t>()[1]), 224.0f);
  const Tensor back = dequantize_fp8_activations(a, 2);
  EXPECT_FLOAT_EQ(back.data_as<float>()[0], -3.0f);
  EXPECT_FLOAT_EQ(back.data_as<float>()[1], 1.5f);
  EXPECT_EQ(back.data_as<float>()[2], 0.0f);
}

}  // namespace
}  // namespace moe::quant
