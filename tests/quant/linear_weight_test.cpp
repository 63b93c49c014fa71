// Reading linear weights from a checkpoint in every stored form: float views, fp8 + block scales (per
// module and transformers' fused expert names), AWQ triples; and the errors for what does not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "core/float_convert.h"
#include "quant/int4_awq.h"
#include "quant/linear_weight.h"
#include "error_of.h"
#include "temp_dir.h"
#include "test_random.h"

namespace moe::quant {
namespace {

using test::error_of;

QuantScheme fp8_scheme() {
  QuantScheme s;
  s.method = QuantMethod::fp8_block;
  return s;
}

TEST(LinearWeight, EveryForm) {
  test::TestRng rng;
  test::TempDir dir;
  const Tensor plain = rng.normal_tensor({16, 32}, 0.1f, DType::BF16);
  const Tensor w = rng.normal_tensor({16, 32}, 0.1f);
  const Fp8BlockWeight fp8 = quantize_fp8_block(w, {});
  const Fp8BlockWeight fused = quantize_fp8_block(rng.normal_tensor({2, 16, 32}, 0.1f), {});
  const AwqInt4Weight awq = quantize_awq_int4(w, 32);
  write_safetensors(dir / "model.safetensors",
                    {{"plain.weight", plain}, {"f.weight", fp8.values}, {"f.weight_scale_inv", fp8.scale_inv},
                     {"experts.gate_up_proj", fused.values}, {"experts.gate_up_proj_scales_inv", fused.scale_inv},
                     {"a.qweight", awq.qweight}, {"a.qzeros", awq.qzeros}, {"a.scales", awq.scales},
                     {"nos.weight", fp8.values}});
  const Checkpoint c = Checkpoint::open(dir.path());

  EXPECT_EQ(load_linear_weight(c, "plain.weight", {}).data(), c.get("plain.weight").data());  // the view itself
  const Tensor f = load_linear_weight(c, "f.weight", fp8_scheme());
  const Tensor f_want = dequantize_fp8_block(fp8.values, fp8.scale_inv, {}, DType::BF16, "f");
  ASSERT_EQ(f.dtype(), DType::BF16);
  EXPECT_EQ(0, std::memcmp(f.data(), f_want.data(), f.nbytes()));
  const Tensor g = load_linear_weight(c, "experts.gate_up_proj", fp8_scheme());
  EXPECT_EQ(g.shape(), (std::vector<int64_t>{2, 16, 32}));

  QuantScheme awq_scheme;
  awq_scheme.method = QuantMethod::awq_int4;
  awq_scheme.group_size = 32;
  EXPECT_TRUE(has_linear_weight(c, "a.weight"));
  EXPECT_FALSE(has_linear_weight(c, "b.weight"));
  const Tensor a = load_linear_weight(c, "a.weight", awq_scheme);
  const Tensor a_want = dequantize_awq_int4(awq, 32, DType::BF16, "a");
  ASSERT_EQ(a.shape(), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(0, std::memcmp(a.data(), a_want.data(), a.nbytes()));

  const std::string no_scheme = error_of([&] { load_linear_weight(c, "f.weight", {}); });
  EXPECT_NE(no_scheme.find("'f.weight' is F8_E4M3"), std::string::npos) << no_scheme;
  const std::string no_scales = error_of([&] { load_linear_weight(c, "nos.weight", fp8_scheme()); });
  EXPECT_NE(no_scales.find("'nos.weight_scale_inv'"), std::string::npos) << no_scales;
  const std::string awq_unsaid = error_of([&] { load_linear_weight(c, "a.weight", fp8_scheme()); });
  EXPECT_NE(awq_unsaid.find("'a.qweight'"), std::string::npos) << awq_unsaid;
  QuantScheme small_blocks = fp8_scheme();
  small_blocks.fp8_block = {.n = 8, .k = 8};
  const std::string blocks = error_of([&] { load_linear_weight(c, "f.weight", small_blocks); });
  EXPECT_NE(blocks.find("expected [2, 4]"), std::string::npos) << blocks;
}

// Random e4m3 codes (no NaN) as an F8_E4M3 tensor of `shape`.
Tensor random_fp8(test::TestRng& rng, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::F8_E4M3, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const auto code = static_cast<uint8_t>(rng.uniform_int(0, 255));
    t.data_as<uint8_t>()[i] = (code & 0x7f) == 0x7f ? 0 : code;
  }
  return t;
}

// Random positive F32 block scales of `shape`, spread over a few octaves.
Tensor random_scales(test::TestRng& rng, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = std::exp2(rng.normal(1.5f)) * 1e-3f;
  return t;
}

// bf16(float(e4m3) x scale of its 128 x 128 block) of every value of values [E, N, K], as bf16 bits: what
// the engine loads, written out here without the library's dequantiser.
std::vector<uint16_t> expected_bf16(const Tensor& values, const Tensor& scales) {
  const int64_t E = values.size(0), N = values.size(1), K = values.size(2);
  const int64_t nb = scales.size(1), kb = scales.size(2);
  std::vector<uint16_t> out;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float s = scales.data_as<float>()[(e * nb + n / 128) * kb + k / 128];
        out.push_back(f32_to_bf16(fp8_e4m3_to_f32(values.data_as<uint8_t>()[(e * N + n) * K + k]) * s));
      }
  return out;
}

// transformers 5's fused FP8 experts as save_pretrained writes them: gate_up_proj [E, 2I, H] and down_proj
// [E, H, I] in F8_E4M3 with "<name>_scale_inv" (singular) [E, ceil(rows / 128), ceil(columns / 128)] F32.
// Sizes off the block (2I = 144, H = 136) so that edge blocks are partial; scales of the wrong shape are
// errors that name the tensor, the shape found and the shape expected.
TEST(LinearWeight, FusedFp8ExpertsAsTransformersSavesThem) {
  test::TestRng rng;
  test::TempDir dir;
  const int64_t E = 3, I = 72, H = 136;
  const Tensor gate_up = random_fp8(rng, {E, 2 * I, H}), down = random_fp8(rng, {E, H, I});
  const Tensor gate_up_scales = random_scales(rng, {E, 2, 2}), down_scales = random_scales(rng, {E, 2, 1});
  const std::string p = "model.layers.1.mlp.experts.";
  write_safetensors(dir / "model.safetensors",
                    {{p + "gate_up_proj", gate_up}, {p + "gate_up_proj_scale_inv", gate_up_scales},
                     {p + "down_proj", down}, {p + "down_proj_scale_inv", down_scales}});
  const Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_EQ(fp8_scale_name(c, p + "gate_up_proj"), p + "gate_up_proj_scale_inv");
  for (const auto& [name, values, scales] : {std::tuple{"gate_up_proj", gate_up, gate_up_scales},
                                             std::tuple{"down_proj", down, down_scales}}) {
    SCOPED_TRACE(name);
    const Tensor w = load_linear_weight(c, p + name, fp8_scheme());
    ASSERT_EQ(w.dtype(), DType::BF16);
    ASSERT_EQ(w.shape(), values.shape());
    const std::vector<uint16_t> want = expected_bf16(values, scales);
    const std::vector<uint16_t> got(w.data_as<uint16_t>(), w.data_as<uint16_t>() + w.numel());
    EXPECT_EQ(got, want);
  }

  test::TempDir bad;
  write_safetensors(bad / "model.safetensors",
                    {{p + "gate_up_proj", gate_up}, {p + "gate_up_proj_scale_inv", gate_up_scales.select(0)},
                     {p + "down_proj", down}, {p + "down_proj_scale_inv", random_scales(rng, {E, 1, 2})}});
  const Checkpoint b = Checkpoint::open(bad.path());
  const std::string no_experts = error_of([&] { load_linear_weight(b, p + "gate_up_proj", fp8_scheme()); });
  EXPECT_NE(no_experts.find("the scales of '" + p + "gate_up_proj' have shape [2, 2], expected [3, 2, 2]"),
            std::string::npos) << no_experts;
  const std::string transposed = error_of([&] { load_linear_weight(b, p + "down_proj", fp8_scheme()); });
  EXPECT_NE(transposed.find("the scales of '" + p + "down_proj' have shape [3, 1, 2], expected [3, 2, 1]"),
            std::string::npos) << transposed;
}

}  // namespace
}  // namespace moe::quant
