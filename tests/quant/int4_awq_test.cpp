// INT4 in AutoAWQ's GEMM layout against hand-computed packing and values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/float_convert.h"
#include "quant/int4_awq.h"
#include "error_of.h"
#include "test_random.h"

namespace moe::quant {
namespace {

using test::error_of;

TEST(AwqInt4, PacksInAutoAwqOrder) {
  // Nibble i holds output kAwqPackOrder[i] = 0, 2, 4, 6, 1, 3, 5, 7 (AutoAWQ's order_map).
  EXPECT_EQ(awq_pack8({0, 1, 2, 3, 4, 5, 6, 7}), 0x75316420u);
  EXPECT_EQ(awq_pack8({15, 0, 0, 0, 0, 0, 0, 0}), 0x0000000fu);
  EXPECT_EQ(awq_pack8({0, 15, 0, 0, 0, 0, 0, 0}), 0x000f0000u);  // output 1 at nibble 4
  for (int j = 0; j < 8; ++j) EXPECT_EQ(awq_unpack(0x75316420u, j), j);
}

TEST(AwqInt4, QuantisesAGroupByHand) {
  // 8 outputs x 4 inputs, one group of 4; output 0 holds [-1, 0, 0.5, 2], the others zeros.
  std::vector<float> w(32, 0.0f);
  w[0] = -1, w[1] = 0, w[2] = 0.5f, w[3] = 2;
  const AwqInt4Weight q = quantize_awq_int4(Tensor::from_f32({8, 4}, w), 4);
  ASSERT_EQ(q.qweight.shape(), (std::vector<int64_t>{4, 1}));
  ASSERT_EQ(q.qzeros.shape(), (std::vector<int64_t>{1, 1}));
  ASSERT_EQ(q.scales.shape(), (std::vector<int64_t>{1, 8}));
  // scale = (2 - -1) / 15 = 0.2 -> f16 0.199951171875; zero = round(1 / scale) = 5;
  // q = round(w / scale) + 5 = 0, 5, 8 (2.5006 rounds up), 15.
  const float scale = f16_to_f32(q.scales.data_as<uint16_t>()[0]);
  EXPECT_EQ(scale, 0.199951171875f);
  EXPECT_EQ(awq_unpack(static_cast<uint32_t>(q.qzeros.data_as<int32_t>()[0]), 0), 5);
  const int want_q[4] = {0, 5, 8, 15};
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(awq_unpack(static_cast<uint32_t>(q.qweight.data_as<int32_t>()[k]), 0), want_q[k]) << k;
  // An all-zero group: scale 1e-5 / 15 (AutoAWQ's clamp), zero 0, q 0.
  EXPECT_EQ(awq_unpack(static_cast<uint32_t>(q.qzeros.data_as<int32_t>()[0]), 3), 0);

  const Tensor back = dequantize_awq_int4(q, 4, DType::F32, "m");
  ASSERT_EQ(back.shape(), (std::vector<int64_t>{8, 4}));
  const float want[4] = {-5 * scale, 0, 3 * scale, 10 * scale};
  for (int k = 0; k < 4; ++k) EXPECT_EQ(back.data_as<float>()[k], want[k]) << k;
  for (int i = 4; i < 32; ++i) EXPECT_EQ(back.data_as<float>()[i], 0.0f) << i;
}

TEST(AwqInt4, RoundTripWithinHalfAStep) {
  test::TestRng rng;
  const int64_t N = 24, K = 256, G = 128;
  const Tensor w = rng.normal_tensor({N, K}, 0.02f, DType::BF16);
  const AwqInt4Weight q = quantize_awq_int4(w, G);
  const Tensor back = dequantize_awq_int4(q, G, DType::F32, "m");
  const Tensor ref = w.to_f32();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const float s = f16_to_f32(q.scales.data_as<uint16_t>()[(k / G) * N + n]);
      const float x = ref.data_as<float>()[n * K + k], y = back.data_as<float>()[n * K + k];
      // Half a step from rounding, plus the zero point's own rounding (at most another half step).
      EXPECT_LE(std::fabs(x - y), 1.0001f * s) << n << "," << k;
    }
}

TEST(AwqInt4, BadInputsAreClearErrors) {
  test::TestRng rng;
  const AwqInt4Weight q = quantize_awq_int4(rng.normal_tensor({16, 64}), 32);
  const std::string group = error_of([&] { dequantize_awq_int4(q, 128, DType::BF16, "layers.1.mlp.experts.0.up_proj"); });
  EXPECT_NE(group.find("'layers.1.mlp.experts.0.up_proj.qweight'"), std::string::npos) << group;
  EXPECT_NE(group.find("group_size 128"), std::string::npos) << group;
  AwqInt4Weight bad = q;
  bad.scales = Tensor::zeros(DType::F16, {2, 16});
  const std::string zero = error_of([&] { dequantize_awq_int4(bad, 32, DType::BF16, "m"); });
  EXPECT_NE(zero.find("'m.scales'"), std::string::npos) << zero;
  EXPECT_NE(zero.find("finite and > 0"), std::string::npos) << zero;
  bad.scales = Tensor::zeros(DType::F16, {2, 8});
  const std::string shape = error_of([&] { dequantize_awq_int4(bad, 32, DType::BF16, "m"); });
  EXPECT_NE(shape.find("expected F16 [2, 16]"), std::string::npos) << shape;
  const std::string odd = error_of([&] { quantize_awq_int4(rng.normal_tensor({12, 64}), 32); });
  EXPECT_NE(odd.find("multiple of 8"), std::string::npos) << odd;
  const std::string undivided = error_of([&] { quantize_awq_int4(rng.normal_tensor({16, 64}), 128); });
  EXPECT_NE(undivided.find("must divide"), std::string::npos) << undivided;
}

}  // namespace
}  // namespace moe::quant
