// MoE layers of every family loaded from fp8 (block-scaled) and int4 (AWQ) checkpoints, against the float64
// oracle run on the same dequantised weights (what the checkpoint means), with identical top-k (the gate
// stays in its dtype). Tolerances, per case, normwise relative:
//   reference experts (fp32 data, fp64 sums): 1e-5 max-abs relative, as for float checkpoints;
//   fast bf16 experts: 1e-2 — the weights are bf16 already, so only the activations' bf16 rounding (2^-9
//     relative) and fp32 sums remain (largest measured for bf16 weights in moe_layer_fast_test: 2.7e-3);
//   fast int8 experts: 0.1 (int8's own bound there).
// The fp8 W8A8 activation quantisation a GPU path applies (per token and 128-wide group, scale amax / 448)
// rounds each activation to 3 mantissa bits, at most 2^-4 relative: each output of a linear lies within
// 2^-4 x sum_k |w_nk x_k| of the exact one (checked here on the dequantised weights).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "moe/core/checkpoint.h"
#include "moe/layer/moe_layer.h"
#include "moe/quant/fp8_block.h"
#include "quant/int4_awq.h"
#include "quant/linear_weight.h"
#include "moe_reference_f64.h"
#include "random_moe_case.h"
#include "temp_dir.h"

namespace moe {
namespace {

using nlohmann::json;
using quant::QuantMethod;

// Experts and shared experts are quantised; the router, its bias and the Qwen2 shared-expert gate are not.
bool is_expert_weight(const std::string& name) {
  return name.ends_with(".weight") && (name.starts_with("experts.") || name.starts_with("shared_expert.") ||
                                       name.starts_with("shared_experts."));
}

// Writes `c` as a checkpoint of `scheme` into `dir` (config.json with its quantization_config).
void write_quantized(const test::MoeCase& c, const quant::QuantScheme& scheme, const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, w] : c.weights) {
    if (!is_expert_weight(name)) {
      tensors.emplace_back(name, w);
    } else if (scheme.method == QuantMethod::fp8_block) {
      const quant::Fp8BlockWeight q = quant::quantize_fp8_block(w, scheme.fp8_block);
      tensors.emplace_back(name, q.values);
      tensors.emplace_back(name + "_scale_inv", q.scale_inv);
    } else {
      const std::string module = name.substr(0, name.size() - 7);
      const quant::AwqInt4Weight q = quant::quantize_awq_int4(w, scheme.group_size);
      tensors.emplace_back(module + ".qweight", q.qweight);
      tensors.emplace_back(module + ".qzeros", q.qzeros);
      tensors.emplace_back(module + ".scales", q.scales);
    }
  }
  write_safetensors(dir / "model.safetensors", tensors);
}

// A random case of `type` whose sizes AWQ can pack (outputs a multiple of 8, inputs of the group size 32).
test::MoeCase int4_sized_case(const char* type, test::TestRng& rng) {
  test::MoeCase c = test::random_moe_case(type, rng);
  c.config["hidden_size"] = 64;
  for (const char* key : {"intermediate_size", "moe_intermediate_size"})
    if (c.config.contains(key)) c.config[key] = 32;
  if (c.config.contains("shared_expert_intermediate_size")) c.config["shared_expert_intermediate_size"] = 64;
  c.weights = test::random_moe_weights(c.config, rng, DType::F32);
  c.x = rng.normal_tensor({c.x.size(0), 64});
  return c;
}

double normwise_error(const Tensor& got, const std::vector<double>& want) {
  double diff = 0, norm = 1e-300;
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = got.data_as<float>()[i];
    if (!std::isfinite(a)) return INFINITY;
    diff += (a - want[i]) * (a - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

double max_abs_relative(const Tensor& got, const std::vector<double>& want) {
  double worst = 0, scale = 1e-300;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(got.data_as<float>()[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return worst / scale;
}

void check_family(const char* type, QuantMethod method, test::TestRng& rng) {
  quant::QuantScheme scheme;
  scheme.method = method;
  scheme.fp8_block = {.n = 16, .k = 16};  // several blocks, partial edge blocks, on these small sizes
  scheme.group_size = 32;
  const test::MoeCase c = method == QuantMethod::fp8_block ? test::random_moe_case(type, rng) : int4_sized_case(type, rng);
  json config = c.config;
  config["quantization_config"] = quant::quant_scheme_json(scheme);
  const std::string what = std::string(type) + " " + std::string(quant::quant_method_name(method));

  test::TempDir dir;
  write_quantized(c, scheme, dir.path());
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  const MoeConfig moe_config = parse_moe_config(config);
  // The oracle reads the weights the checkpoint means: the dequantised ones, the float ones as stored.
  const auto want = test::moe_reference_f64(
      config, [&](const std::string& n) { return quant::load_linear_weight(checkpoint, n, moe_config.quant); }, c.x);

  struct Run {
    LayerOptions options;
    double bound;
  };
  const Run runs[] = {{{.cpu_experts = CpuExperts::reference}, 1e-5},
                      {{.cpu_experts = CpuExperts::fast, .cpu_weights = quant::WeightFormat::bf16}, 1e-2},
                      {{.cpu_experts = CpuExperts::fast, .cpu_weights = quant::WeightFormat::int8}, 0.1}};
  for (const Run& run : runs) {
    MoeLayer layer(moe_config, load_moe_weights(checkpoint, "", moe_config), run.options);
    const LayerOutput got = layer.forward(c.x);
    const bool reference = run.options.cpu_experts == CpuExperts::reference;
    const double error = reference ? max_abs_relative(got.hidden_states, want.out) : normwise_error(got.hidden_states, want.out);
    EXPECT_LE(error, run.bound) << what << (reference ? " reference" : " fast");
    for (size_t i = 0; i < want.ids.size(); ++i) {
      if (want.selection_margin[i / want.top_k] > 1e-5) {
        EXPECT_EQ(got.topk.ids.data_as<int32_t>()[i], want.ids[i]) << what;
      }
    }
  }

  // The quantisation itself changes the block's output (so the checks above see the quantised weights).
  const auto original = test::moe_reference_f64(c.config, [&](const std::string& n) { return c.weight(n); }, c.x);
  EXPECT_GT(normwise_error(Tensor::from_f32({want.tokens, want.hidden}, std::vector<float>(want.out.begin(), want.out.end())),
                           original.out),
            1e-4)
      << what;
}

TEST(QuantizedLayer, Fp8EveryFamily) {
  test::TestRng rng;
  for (const char* type : test::kMoeModelTypes) check_family(type, QuantMethod::fp8_block, rng);
}

TEST(QuantizedLayer, Int4EveryFamily) {
  test::TestRng rng;
  for (const char* type : test::kMoeModelTypes) check_family(type, QuantMethod::awq_int4, rng);
}

TEST(QuantizedLayer, Fp8FusedExpertsLoadAsThePerExpertOnes) {
  // transformers' fused layout: experts.gate_up_proj [E, 2I, H] (gate rows, then up) and experts.down_proj
  // [E, H, I] in fp8 with their "_scales_inv" [E, blocks, blocks]; the blocks of gate_up span both halves.
  test::TestRng rng;
  const test::MoeCase c = test::random_moe_case("qwen3_moe", rng);
  json config = c.config;
  quant::QuantScheme scheme;
  scheme.method = QuantMethod::fp8_block;
  scheme.fp8_block = {.n = 8, .k = 8};
  config["quantization_config"] = quant::quant_scheme_json(scheme);
  const MoeConfig moe_config = parse_moe_config(config);
  const int64_t E = moe_config.router.n_experts, I = moe_config.expert_intermediate_size, H = moe_config.hidden_size;
  Tensor gate_up = Tensor::empty(DType::F32, {E, 2 * I, H}), down = Tensor::empty(DType::F32, {E, H, I});
  for (int64_t e = 0; e < E; ++e) {
    const size_t rows = static_cast<size_t>(I * H);
    std::memcpy(gate_up.data_as<float>() + 2 * e * rows, c.weight(fmt::format("experts.{}.gate_proj.weight", e)).to_f32().data(), rows * 4);
    std::memcpy(gate_up.data_as<float>() + (2 * e + 1) * rows, c.weight(fmt::format("experts.{}.up_proj.weight", e)).to_f32().data(), rows * 4);
    std::memcpy(down.data_as<float>() + e * rows, c.weight(fmt::format("experts.{}.down_proj.weight", e)).to_f32().data(), rows * 4);
  }
  const quant::Fp8BlockWeight gu = quant::quantize_fp8_block(gate_up, scheme.fp8_block);
  const quant::Fp8BlockWeight dn = quant::quantize_fp8_block(down, scheme.fp8_block);
  test::TempDir dir;
  write_safetensors(dir / "model.safetensors", {{"gate.weight", c.weight("gate.weight")},
                                                {"experts.gate_up_proj", gu.values}, {"experts.gate_up_proj_scales_inv", gu.scale_inv},
                                                {"experts.down_proj", dn.values}, {"experts.down_proj_scales_inv", dn.scale_inv}});
  const MoeWeights w = load_moe_weights(Checkpoint::open(dir.path()), "", moe_config);
  const Tensor gate_up_want = quant::dequantize_fp8_block(gu.values, gu.scale_inv, scheme.fp8_block, DType::BF16, "gu");
  const Tensor down_want = quant::dequantize_fp8_block(dn.values, dn.scale_inv, scheme.fp8_block, DType::BF16, "dn");
  ASSERT_EQ(static_cast<int64_t>(w.experts.size()), E);
  for (int64_t e = 0; e < E; ++e) {
    const Tensor gate = w.experts[e].gate.to(DType::BF16), up = w.experts[e].up.to(DType::BF16), dw = w.experts[e].down.to(DType::BF16);
    const size_t rows = static_cast<size_t>(I * H) * 2;
    EXPECT_EQ(0, std::memcmp(gate.data(), static_cast<const char*>(gate_up_want.data()) + 2 * e * rows, rows)) << e;
    EXPECT_EQ(0, std::memcmp(up.data(), static_cast<const char*>(gate_up_want.data()) + (2 * e + 1) * rows, rows)) << e;
    EXPECT_EQ(0, std::memcmp(dw.data(), static_cast<const char*>(down_want.data()) + e * rows, rows)) << e;
  }
}

TEST(QuantizedLayer, Fp8ActivationQuantisationWithinItsBound) {
  test::TestRng rng;
  const int64_t T = 5, N = 48, K = 300;  // K not a multiple of the 128-wide groups
  const quant::Fp8BlockWeight q = quant::quantize_fp8_block(rng.normal_tensor({N, K}, 0.05f), {});
  const Tensor w = quant::dequantize_fp8_block(q.values, q.scale_inv, {}, DType::F32, "w");
  const Tensor x = rng.normal_tensor({T, K});
  const Tensor xq = quant::dequantize_fp8_activations(quant::quantize_fp8_activations(x, 128), 128);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0, quantised = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double wv = w.data_as<float>()[n * K + k];
        exact += wv * x.data_as<float>()[t * K + k];
        quantised += wv * xq.data_as<float>()[t * K + k];
        magnitude += std::fabs(wv * x.data_as<float>()[t * K + k]);
      }
      EXPECT_LE(std::fabs(quantised - exact), 0x1.0p-4 * magnitude + 1e-12) << t << "," << n;
    }
}

}  // namespace
}  // namespace moe
