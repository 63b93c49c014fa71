// The FP8 W8A8 grouped GEMMs (grouped_gemm.cu's FP8 variant) and the activation quantiser that feeds them:
// the device quantiser against quant::quantize_fp8_activations bit for bit; both GEMMs against float64 on
// the same quantised operands, for every fp8 tile height; and the CUDA layer's fp8 grouped path against a
// float64 W8A8 layer built here from the CPU layer's routing.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "cpu/ops.h"
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

using test::bf16_bits;
constexpr quant::Fp8BlockShape kBlock{.n = 128, .k = 128};

// x [T, K] F32 through the W8A8 activation quantiser (the CPU oracle) and back: the operand the fp8 GEMM sees.
std::vector<double> quantised_rows(const Tensor& x) {
  const Tensor back = quant::dequantize_fp8_activations(quant::quantize_fp8_activations(x));
  return std::vector<double>(back.data_as<float>(), back.data_as<float>() + back.numel());
}

// w [..., N, K] through the block quantiser and back (fp32): the weight the fp8 kernels compute with.
Tensor fp8_round_trip(const Tensor& w) {
  const quant::Fp8BlockWeight q = quant::quantize_fp8_block(w, kBlock);
  return quant::dequantize_fp8_block(q.values, q.scale_inv, kBlock, DType::F32, "test weight");
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// max |got - want| / max |want|.
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return worst / scale;
}

std::vector<double> bf16_values(const std::vector<uint16_t>& bits) {
  std::vector<double> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = ::moe::bf16_to_f32(bits[i]);
  return out;
}

TEST(Fp8Activations, DeviceQuantiserMatchesTheCpuBitForBit) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const int64_t rows = 37, cols = 384;
  Tensor x = rng.normal_tensor({rows, cols}, 5.0f, DType::BF16);
  uint16_t* bits = x.data_as<uint16_t>();
  std::fill_n(bits + 3 * cols + 128, 128, uint16_t{0});  // an all-zero group: scale 1
  bits[7 * cols + 300] = 0x4480;                         // 1024: its group's amax
  bits[9 * cols + 5] = 0x8001;                           // a subnormal
  const quant::Fp8Activations want = quant::quantize_fp8_activations(x.to_f32());

  test::Device<uint16_t> d_x(std::vector<uint16_t>(bits, bits + x.numel()));
  test::Device<uint8_t> d_values(x.numel());
  test::Device<float> d_scales(rows * cols / 128);
  quantize_rows_fp8(reinterpret_cast<const bf16*>(d_x.get()), rows, cols, d_values.get(), d_scales.get(), nullptr);
  const auto values = d_values.host();
  const auto scales = d_scales.host();
  ASSERT_EQ(std::memcmp(values.data(), want.values.data(), values.size()), 0) << "e4m3 values differ";
  for (int64_t i = 0; i < rows * cols / 128; ++i) ASSERT_EQ(scales[i], want.scales.data_as<float>()[i]) << "scale " << i;
  EXPECT_EQ(scales[3 * 3 + 1], 1.0f) << "an all-zero group has scale 1";
  EXPECT_EQ(scales[7 * 3 + 2], 1024.0f / 448.0f);
}

// Gate/up with SwiGLU on fp8 x and fp8 experts, then down on the GPU's own act quantised by the CPU oracle:
// float64 on exactly the operands the kernels read, so the tolerance is the bf16 rounding of their outputs
// (2^-9 of a value) and the fp32 accumulation: 4e-3 of the largest output. Scales left out or applied to the
// wrong rows or blocks move outputs by whole factors.
TEST(CudaGroupedGemmFp8, MatchesFloat64OnTheQuantisedOperands) {
  MOE_SKIP_WITHOUT_GPU();
  if (!fp8_grouped_gemm_available()) GTEST_SKIP() << "this GPU has no fp8 mma (compute capability 8.9 or later)";
  test::TestRng rng;
  struct Case {
    int E;
    int64_t T, H, I;
    std::vector<int> tiles;
  };
  // H = 8192 takes the 16-row tiles' 256-value k-steps; I = 384 three scale groups in down's k.
  const std::vector<Case> cases = {{1, 13, 256, 384, {16, 32, 48, 64}},  {5, 300, 256, 256, {16, 32, 48, 64}},
                                   {16, 61, 512, 384, {16, 32, 48, 64}}, {16, 1, 256, 256, {16}},
                                   {4, 5, 8192, 256, {16}}};
  for (const Case& c : cases)
    for (int tile_rows : c.tiles) {
      const int E = c.E;
      const int64_t T = c.T, H = c.H, I = c.I;
      SCOPED_TRACE("E " + std::to_string(E) + " T " + std::to_string(T) + " H " + std::to_string(H) + " tile " +
                   std::to_string(tile_rows));
      const int k = std::min(E, 2);
      const auto [experts, w13, w2] = test::random_experts(E, H, I, rng);
      const Tensor x = rng.normal_tensor({T, H}, 1.0f, DType::BF16).to_f32();  // bf16-exact values
      TopK topk{Tensor::empty(DType::I32, {T, k}), Tensor::from_f32({T, k}, std::vector<float>(T * k, 0.5f))};
      for (int64_t t = 0; t < T; ++t)  // expert E-1 gets nothing when E > 2
        for (int j = 0; j < k; ++j)
          topk.ids.data_as<int32_t>()[t * k + j] = static_cast<int32_t>((t + j) % std::max(1, E - (E > 2)));
      const ExpertBatch batch = cpu::permute_contiguous(x, topk, E);
      const int64_t rows = T * k;
      std::vector<int32_t> offsets(E), counts(E);
      for (int e = 0; e < E; ++e) {
        offsets[e] = static_cast<int32_t>(batch.expert_offsets.data_as<int64_t>()[e]);
        counts[e] = static_cast<int32_t>(batch.expert_counts.data_as<int64_t>()[e]);
      }
      const int32_t* row_token = batch.row_token.data_as<int32_t>();
      std::vector<int32_t> row_expert(rows);
      for (int e = 0; e < E; ++e) std::fill_n(row_expert.begin() + offsets[e], counts[e], e);

      // The weights as the layer holds them (bf16 [E, 2I, H] and [E, H, I]), quantised on the device.
      test::Device<uint16_t> d_w13(w13), d_w2(w2), d_x(bf16_bits(x));
      test::Device<uint8_t> q13(w13.size()), q2(w2.size()), d_xq(T * H), d_actq(rows * I);
      test::Device<float> s13(2 * E * (I / 128) * (H / 128)), s2(E * (H / 128) * (I / 128)), d_xs(T * H / 128),
          d_acts(rows * I / 128);
      test::Device<int> bad(std::vector<int>{0});
      quantize_fp8_block(reinterpret_cast<const bf16*>(d_w13.get()), 2 * E, I, H, q13.get(), s13.get(), bad.get(),
                         nullptr);
      quantize_fp8_block(reinterpret_cast<const bf16*>(d_w2.get()), E, H, I, q2.get(), s2.get(), bad.get(), nullptr);
      quantize_rows_fp8(reinterpret_cast<const bf16*>(d_x.get()), T, H, d_xq.get(), d_xs.get(), nullptr);

      test::Device<uint16_t> d_act(rows * I), d_out(rows * H);
      test::Device<int32_t> d_offsets(offsets), d_counts(counts),
          d_token(std::vector<int32_t>(row_token, row_token + rows));
      const int64_t max_tiles = rows + E;
      test::Device<int32_t> tile_expert(max_tiles), tile_row(max_tiles), n_tiles(1);
      build_tiles(d_offsets.get(), d_counts.get(), E, tile_rows, tile_expert.get(), tile_row.get(), n_tiles.get(),
                  max_tiles, nullptr);
      GroupedGemmArgs up{.a = nullptr, .gather = d_token.get(), .b = nullptr,
                         .c = reinterpret_cast<bf16*>(d_act.get()), .segment_offsets = d_offsets.get(),
                         .segment_counts = d_counts.get(), .tile_expert = tile_expert.get(),
                         .tile_row = tile_row.get(), .n_tiles = n_tiles.get(), .max_tiles = max_tiles, .k = H,
                         .n = I};
      up.a_fp8 = d_xq.get();
      up.a_scale = d_xs.get();
      up.b_fp8 = q13.get();
      up.b_scale = s13.get();
      grouped_gemm_swiglu(up, tile_rows, nullptr);
      const std::vector<uint16_t> act_bits = d_act.host();

      // Reference gate/up on the quantised x and the fp8 experts.
      const std::vector<double> xq = quantised_rows(x);
      std::vector<double> want_act(rows * I);
      for (int e = 0; e < E; ++e) {
        const Tensor gate = fp8_round_trip(experts[e].gate), upw = fp8_round_trip(experts[e].up);
        for (int64_t r = offsets[e]; r < offsets[e] + counts[e]; ++r)
          for (int64_t i = 0; i < I; ++i) {
            double g = 0, u = 0;
            for (int64_t h = 0; h < H; ++h) {
              const double v = xq[row_token[r] * H + h];
              g += v * gate.data_as<float>()[i * H + h];
              u += v * upw.data_as<float>()[i * H + h];
            }
            want_act[r * I + i] = silu(g) * u;
          }
      }
      EXPECT_LE(relative_error(bf16_values(act_bits), want_act), 4e-3) << "gate/up";

      // Down on the GPU's act, quantised by the device (bit for bit the oracle's: checked above).
      quantize_rows_fp8(reinterpret_cast<const bf16*>(d_act.get()), rows, I, d_actq.get(), d_acts.get(), nullptr);
      GroupedGemmArgs down = up;
      down.gather = nullptr;
      down.c = reinterpret_cast<bf16*>(d_out.get());
      down.k = I;
      down.n = H;
      down.a_fp8 = d_actq.get();
      down.a_scale = d_acts.get();
      down.b_fp8 = q2.get();
      down.b_scale = s2.get();
      down.tile_map_settled = true;  // build_tiles ran launches back, as in the layer
      grouped_gemm(down, tile_rows, nullptr);
      Tensor act = Tensor::empty(DType::F32, {rows, I});
      for (int64_t i = 0; i < rows * I; ++i) act.data_as<float>()[i] = ::moe::bf16_to_f32(act_bits[i]);
      const std::vector<double> actq = quantised_rows(act);
      std::vector<double> want_out(rows * H);
      for (int e = 0; e < E; ++e) {
        const Tensor w = fp8_round_trip(experts[e].down);
        for (int64_t r = offsets[e]; r < offsets[e] + counts[e]; ++r)
          for (int64_t h = 0; h < H; ++h) {
            double sum = 0;
            for (int64_t i = 0; i < I; ++i) sum += actq[r * I + i] * w.data_as<float>()[h * I + i];
            want_out[r * H + h] = sum;
          }
      }
      EXPECT_LE(relative_error(bf16_values(d_out.host()), want_out), 4e-3) << "down";
      EXPECT_EQ(bad.host()[0], 0);
    }
}

TEST(CudaGroupedGemmFp8, ShortScaleGroupsAreRefused) {
  MOE_SKIP_WITHOUT_GPU();
  if (!fp8_grouped_gemm_available()) GTEST_SKIP() << "this GPU has no fp8 mma";
  test::Device<uint8_t> bytes(64 * 192);
  test::Device<float> scales(64);
  test::Device<int32_t> ints(std::vector<int32_t>{0, 1, 0, 0, 1});
  GroupedGemmArgs g{.a = nullptr, .gather = nullptr, .b = nullptr, .c = nullptr, .segment_offsets = ints.get(),
                    .segment_counts = ints.get() + 1, .tile_expert = ints.get() + 2, .tile_row = ints.get() + 3,
                    .n_tiles = ints.get() + 4, .max_tiles = 1, .k = 192, .n = 64};
  g.a_fp8 = g.b_fp8 = bytes.get();
  g.a_scale = g.b_scale = scales.get();
  try {
    grouped_gemm(g, 16, nullptr);
    FAIL() << "k = 192 is not whole 128-value groups";
  } catch (const moe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the 128-value scale group"), std::string::npos) << e.what();
  }
  g.k = 256;
  try {
    grouped_gemm(g, 128, nullptr);
    FAIL() << "128-row tiles have no fp8 kernel";
  } catch (const moe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no fp8 kernel"), std::string::npos) << e.what();
  }
}

// One W8A8 MLP on one token row in float64: x quantised per 128-value group, gate/up on the fp8 weights, act
// rounded to bf16 (the GPU stores it so) and quantised, then down.
std::vector<double> w8a8_mlp(const float* x, int64_t H, const Tensor& gate, const Tensor& up, const Tensor& down) {
  const int64_t I = gate.size(0);
  const std::vector<double> xq = quantised_rows(Tensor::from_f32({1, H}, std::vector<float>(x, x + H)));
  Tensor act = Tensor::empty(DType::F32, {1, I});
  for (int64_t i = 0; i < I; ++i) {
    double g = 0, u = 0;
    for (int64_t h = 0; h < H; ++h) {
      g += xq[h] * gate.data_as<float>()[i * H + h];
      u += xq[h] * up.data_as<float>()[i * H + h];
    }
    act.data_as<float>()[i] = ::moe::bf16_to_f32(::moe::f32_to_bf16(static_cast<float>(silu(g) * u)));
  }
  const std::vector<double> aq = quantised_rows(act);
  std::vector<double> out(H);
  for (int64_t h = 0; h < H; ++h) {
    double sum = 0;
    for (int64_t i = 0; i < I; ++i) sum += aq[i] * down.data_as<float>()[h * I + i];
    out[h] = sum;
  }
  return out;
}

// The layer with the fused decode path off, so that every batch runs the grouped GEMMs, at the fp8 tile
// heights (16 and 32 rows): against the float64 W8A8 layer on the CPU layer's routing. The tolerance is 1e-2 of the largest
// output: the bf16 expert outputs (rows_out) and the rare act value whose fp32 and float64 sums round to
// different e4m3 neighbours. The bf16 layer is several times further off, so a path that ran the bf16
// experts or skipped the activation quantisation would fail.
TEST(CudaLayerFp8, GroupedPathMatchesAFloat64W8A8Layer) {
  MOE_SKIP_WITHOUT_GPU();
  if (!fp8_grouped_gemm_available()) GTEST_SKIP() << "this GPU has no fp8 mma";
  test::TestRng rng;
  const test::ScopedEnv no_decode("MOE_DECODE_MAX_TOKENS", "0");
  struct Case {
    const char* type;
    int64_t H, I;
    int E, k;
    std::vector<int64_t> tokens;
  };
  for (const Case& c : {Case{"deepseek_v3", 512, 256, 32, 4, {4, 33, 120}},
                        Case{"qwen3_moe", 256, 384, 64, 8, {5, 100, 128}},
                        Case{"mixtral", 512, 640, 8, 2, {3, 40, 64}}}) {
    MoeConfig config = parse_moe_config(test::cuda_case_config(c.type, c.H, c.I, c.E, c.k));
    const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
    MoeLayer cpu(config, weights);
    config.quant.method = quant::QuantMethod::fp8_block;
    const int64_t H = c.H, k = c.k;
    MoeLayer gpu = test::cuda_layer(config, weights, {.max_tokens = 256});
    std::vector<SwigluWeights> fp8(weights.experts.size());
    for (size_t e = 0; e < fp8.size(); ++e)
      fp8[e] = {fp8_round_trip(weights.experts[e].gate), fp8_round_trip(weights.experts[e].up),
                fp8_round_trip(weights.experts[e].down)};
    const bool shared = weights.shared.gate.defined();
    const SwigluWeights fp8_shared =
        shared ? SwigluWeights{fp8_round_trip(weights.shared.gate), fp8_round_trip(weights.shared.up),
                               fp8_round_trip(weights.shared.down)}
               : SwigluWeights{};
    for (int64_t T : c.tokens) {
      SCOPED_TRACE(std::string(c.type) + " T " + std::to_string(T) + ": " + gpu.describe_path(T));
      EXPECT_NE(gpu.describe_path(T).find("fp8 experts"), std::string::npos);
      const Tensor xb = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
      const Tensor x = xb.to_f32();
      const LayerOutput want = cpu.forward(x);
      test::Device<uint16_t> d_x(std::vector<uint16_t>(xb.data_as<uint16_t>(), xb.data_as<uint16_t>() + T * H));
      test::Device<float> d_out(T * H), d_weights(T * k);
      test::Device<int32_t> d_ids(T * k);
      test::forward_on_device(gpu, d_x.get(), T, d_out.get(), d_ids.get(), d_weights.get(), nullptr);
      const auto out = d_out.host();
      const auto ids = d_ids.host();
      std::vector<double> got(out.begin(), out.end()), reference(T * H, 0.0), bf16_layer(T * H);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < k; ++j) {
          const int32_t e = want.topk.ids.data_as<int32_t>()[t * k + j];
          ASSERT_EQ(ids[t * k + j], e) << "token " << t << " choice " << j;
          const double w = want.topk.weights.data_as<float>()[t * k + j];
          const std::vector<double> y = w8a8_mlp(x.data_as<float>() + t * H, H, fp8[e].gate, fp8[e].up, fp8[e].down);
          for (int64_t h = 0; h < H; ++h) reference[t * H + h] += w * y[h];
        }
        if (shared) {
          const std::vector<double> y =
              w8a8_mlp(x.data_as<float>() + t * H, H, fp8_shared.gate, fp8_shared.up, fp8_shared.down);
          for (int64_t h = 0; h < H; ++h) reference[t * H + h] += y[h];
        }
      }
      for (int64_t i = 0; i < T * H; ++i) bf16_layer[i] = want.hidden_states.data_as<float>()[i];
      const double error = relative_error(got, reference);
      EXPECT_LE(error, 1e-2);
      EXPECT_GT(relative_error(bf16_layer, reference), 3 * error) << "the fp8 path must be what ran";
    }
  }
}

}  // namespace
}  // namespace moe::cuda
