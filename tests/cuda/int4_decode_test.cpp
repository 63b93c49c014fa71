// INT4 experts on the GPU: the device quantiser (int4_group.cu) against quant/int4_awq's, bit for bit, read
// back through int4_tiles.h's layout; a dequantised AWQ checkpoint quantised again on the device recovers its
// integers; the fused decode path streaming the tiles (decode.cu's int4 variant) against the CPU layer on the
// same int4 weights dequantised; non-finite weights refused.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "cuda/int4_tiles.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "device_layer.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"
#include "quant/int4_awq.h"
#include "scoped_env.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

constexpr int64_t kGroup = 128;

// The device's int4 tiles of w [rows, cols] bf16, read back per weight.
struct DeviceInt4 {
  std::vector<uint8_t> values;
  std::vector<uint32_t> scale_zero;
  int64_t cols = 0;
  int bad = 0;
  int q(int64_t n, int64_t k) const {
    const Int4Position at = int4_tile_position(n, k, cols);
    return (values[at.byte] >> at.shift) & 0xf;
  }
  uint32_t entry(int64_t n, int64_t k) const { return scale_zero[int4_scale_zero_index(n, k, cols)]; }
};

DeviceInt4 quantize_on_device(const Tensor& w) {
  const int64_t rows = w.size(0), cols = w.size(1);
  const uint16_t* bits = w.data_as<uint16_t>();
  test::Device<uint16_t> d_w(std::vector<uint16_t>(bits, bits + w.numel()));
  test::Device<uint8_t> d_values(rows * cols / 2);
  test::Device<uint32_t> d_sz(rows * cols / kGroup);
  test::Device<int> d_bad(std::vector<int>{0});
  quantize_int4_tiles(reinterpret_cast<const bf16*>(d_w.get()), rows, cols, d_values.get(), d_sz.get(), d_bad.get(),
                      nullptr);
  return {.values = d_values.host(), .scale_zero = d_sz.host(), .cols = cols, .bad = d_bad.host()[0]};
}

// The CPU's quantisation of w, per weight: q, zero points and f16 scale bits.
struct HostInt4 {
  quant::AwqInt4Weight w;
  int64_t N = 0;
  int q(int64_t n, int64_t k) const {
    return quant::awq_unpack(static_cast<uint32_t>(w.qweight.data_as<int32_t>()[k * (N / 8) + n / 8]), n % 8);
  }
  int zero(int64_t n, int64_t k) const {
    return quant::awq_unpack(static_cast<uint32_t>(w.qzeros.data_as<int32_t>()[k / kGroup * (N / 8) + n / 8]), n % 8);
  }
  uint16_t scale(int64_t n, int64_t k) const { return w.scales.data_as<uint16_t>()[k / kGroup * N + n]; }
};

HostInt4 quantize_on_host(const Tensor& w) { return {quant::quantize_awq_int4(w, kGroup), w.size(0)}; }

TEST(Int4Tiles, DeviceQuantiserMatchesTheCpuBitForBit) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const int64_t rows = 48, cols = 384;
  Tensor w = rng.normal_tensor({rows, cols}, 3.0f, DType::BF16);
  uint16_t* bits = w.data_as<uint16_t>();
  std::fill_n(bits + 5 * cols + 128, 128, uint16_t{0x3f80});  // a constant group: the 1e-5 range floor
  std::fill_n(bits + 17 * cols, 128, uint16_t{0});            // an all-zero group
  bits[30 * cols + 300] = 0x4780;                             // 65536: a scale far from the others
  const HostInt4 want = quantize_on_host(w);
  const DeviceInt4 got = quantize_on_device(w);
  EXPECT_EQ(got.bad, 0);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k = 0; k < cols; ++k) {
      ASSERT_EQ(got.q(n, k), want.q(n, k)) << "row " << n << " input " << k;
      if (k % kGroup == 0) {
        ASSERT_EQ(got.entry(n, k) & 0xffffu, want.scale(n, k)) << "scale of row " << n << " group " << k / kGroup;
        ASSERT_EQ(got.entry(n, k) >> 16, static_cast<uint32_t>(want.zero(n, k))) << "zero of row " << n;
      }
    }
  }
}

// An AWQ checkpoint is dequantised to bf16 at load and the GPU quantises that again: where a group's stored
// integers span 0..15 (round-to-nearest puts the group's extremes there, but for an f16 scale rounded up the
// largest may land on 14) the integers and zero points come back as stored and the scale within the bf16
// rounding of the dequantised weights.
TEST(Int4Tiles, ADequantisedCheckpointQuantisesBackToItsIntegers) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const int64_t rows = 64, cols = 512;
  const Tensor w = rng.normal_tensor({rows, cols}, 0.05f, DType::BF16);
  const HostInt4 stored = quantize_on_host(w);
  const Tensor loaded = quant::dequantize_awq_int4(stored.w, kGroup, DType::BF16, "test");
  const DeviceInt4 got = quantize_on_device(loaded);
  int64_t full_range = 0;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k0 = 0; k0 < cols; k0 += kGroup) {
      int lo = 15, hi = 0;
      for (int64_t k = k0; k < k0 + kGroup; ++k) {
        lo = std::min(lo, stored.q(n, k));
        hi = std::max(hi, stored.q(n, k));
      }
      if (lo != 0 || hi != 15) continue;
      ++full_range;
      for (int64_t k = k0; k < k0 + kGroup; ++k) ASSERT_EQ(got.q(n, k), stored.q(n, k)) << "row " << n << " input " << k;
      ASSERT_EQ(got.entry(n, k0) >> 16, static_cast<uint32_t>(stored.zero(n, k0))) << "zero of row " << n;
      const float s = f16_to_f32(static_cast<uint16_t>(got.entry(n, k0) & 0xffffu));
      const float want = f16_to_f32(stored.scale(n, k0));
      ASSERT_LE(std::fabs(s - want), want * 0x1.0p-7f) << "scale of row " << n << " group " << k0 / kGroup;
    }
  }
  EXPECT_GE(full_range, rows * cols / kGroup * 9 / 10) << "most round-to-nearest groups span 0..15";
}

// w [N, K] through quant/int4_awq (the format's oracle): the weight the int4 kernels compute with, in fp32.
Tensor int4_round_trip(const Tensor& w) {
  return quant::dequantize_awq_int4(quant::quantize_awq_int4(w, kGroup), kGroup, DType::F32, "test weight");
}

MoeWeights int4_round_trip(const MoeWeights& w) {
  MoeWeights out = w;
  const auto mlp = [](const SwigluWeights& m) {
    return SwigluWeights{
        .gate = int4_round_trip(m.gate), .up = int4_round_trip(m.up), .down = int4_round_trip(m.down)};
  };
  for (size_t e = 0; e < w.experts.size(); ++e) out.experts[e] = mlp(w.experts[e]);
  if (w.shared.gate.defined()) out.shared = mlp(w.shared);
  return out;
}

TEST(Int4Tiles, NonFiniteExpertWeightIsAnError) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  MoeConfig config = parse_moe_config(test::cuda_case_config("qwen3_moe", 256, 128, 8, 2));
  config.quant.method = quant::QuantMethod::awq_int4;
  MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
  Tensor gate = weights.experts[3].gate.to(DType::F32);
  gate.data_as<float>()[300] = std::numeric_limits<float>::infinity();
  weights.experts[3].gate = gate;
  try {
    test::cuda_layer(config, weights, {.max_tokens = 8});
    FAIL() << "an infinite expert weight must be refused";
  } catch (const moe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN or an Inf"), std::string::npos) << e.what();
  }
}

// The CPU layer on the int4 weights (dequantised) is the reference; activations are bf16 in both (x, and
// silu(gate) * up between the GEMVs), so the tolerance is the bf16 decode path's: 1e-2 of the largest output.
// The int4 rounding of the weights moves the outputs by many times that, so a kernel that read the bf16
// experts instead would fail; 1, 2, 5 and 8 tokens fill 1 to 8 of the tiles' token columns.
TEST(CudaDecodeInt4, MatchesTheCpuLayerOnTheDequantisedWeights) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::ScopedEnv limit("MOE_DECODE_MAX_TOKENS");
  limit.unset();  // the int4 layer's own limit: every batch up to 8 tokens
  struct Case {
    const char* type;
    int64_t H, I;
    int E, k;
  };
  for (Case c : {Case{"qwen3_moe", 512, 128, 32, 4}, Case{"deepseek_v3", 2304, 1152, 32, 4},
                 Case{"qwen2_moe", 4608, 256, 16, 2}, Case{"mixtral", 2048, 2176, 8, 2}}) {
    MoeConfig config = parse_moe_config(test::cuda_case_config(c.type, c.H, c.I, c.E, c.k));
    const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
    const MoeWeights dequantised = int4_round_trip(weights);
    MoeLayer cpu_int4(config, dequantised), cpu_bf16(config, weights);
    config.quant.method = quant::QuantMethod::awq_int4;
    const int64_t H = c.H, k = c.k, Tm = 16;
    MoeLayer gpu = test::cuda_layer(config, weights, {.max_tokens = Tm});
    ASSERT_EQ(gpu.describe_path(8), "fused decode kernel, int4 experts");
    ASSERT_NE(gpu.describe_path(9).find("bf16 experts"), std::string::npos) << gpu.describe_path(9);
    for (int64_t T : {1, 2, 5, 8}) {
      SCOPED_TRACE(std::string(c.type) + " H " + std::to_string(H) + " T " + std::to_string(T));
      const Tensor xb = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
      const LayerOutput want = cpu_int4.forward(xb.to_f32()), bf16_out = cpu_bf16.forward(xb.to_f32());
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
      const double int4_shift = test::max_relative_error(
          std::vector<float>(b.data_as<float>(), b.data_as<float>() + T * H), want.hidden_states);
      EXPECT_GT(int4_shift, 3 * error) << "the int4 weights must be what the kernel reads";
    }
  }
}

}  // namespace
}  // namespace moe::cuda
