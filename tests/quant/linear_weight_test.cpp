// Reading linear weights from a checkpoint in every stored form: float views, fp8 + block scales (per
// module and transformers' fused expert names), AWQ triples; and the errors for what does not fit.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace moe::quant
