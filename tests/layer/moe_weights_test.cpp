#include "moe/layer/moe_weights.h"

#include <gtest/gtest.h>

#include "layer_test_util.h"
#include "moe/core/safetensors.h"

#include <cstring>

namespace moe {
namespace {

using test::MoeCase;

std::string load_error(const std::vector<std::pair<std::string, Tensor>>& tensors, const MoeConfig& config,
                       const std::string& prefix = "") {
  test::TempDir dir;
  write_safetensors(dir.path() / "w.safetensors", tensors);
  try {
    load_moe_weights(Checkpoint::open(dir.path() / "w.safetensors"), prefix, config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeWeights, FusedTransformers5LayoutEqualsPerExpertNames) {
  test::TestRng rng;
  const MoeCase c = test::random_moe_case("qwen3_moe", rng);
  const MoeConfig config = parse_moe_config(c.config);
  const int64_t E = config.router.n_experts, I = config.expert_intermediate_size, H = config.hidden_size;
  Tensor gate_up = Tensor::empty(DType::F32, {E, 2 * I, H}), down = Tensor::empty(DType::F32, {E, H, I});
  for (int64_t e = 0; e < E; ++e) {
    const std::string base = "experts." + std::to_string(e) + ".";
    const Tensor g = c.weight(base + "gate_proj.weight").to_f32(), u = c.weight(base + "up_proj.weight").to_f32();
    const Tensor d = c.weight(base + "down_proj.weight").to_f32();
    std::copy_n(g.data_as<float>(), I * H, gate_up.data_as<float>() + e * 2 * I * H);
    std::copy_n(u.data_as<float>(), I * H, gate_up.data_as<float>() + e * 2 * I * H + I * H);
    std::copy_n(d.data_as<float>(), H * I, down.data_as<float>() + e * H * I);
  }
  test::TempDir dir;
  write_safetensors(dir.path() / "fused.safetensors",
                    {{"gate.weight", c.weight("gate.weight")}, {"experts.gate_up_proj", gate_up}, {"experts.down_proj", down}});
  const MoeWeights fused = load_moe_weights(Checkpoint::open(dir.path() / "fused.safetensors"), "", config);
  const MoeWeights split = test::load_case_weights(c, config, dir.path());
  MoeLayer a(config, fused), b(config, split);
  const LayerOutput ya = a.forward(c.x), yb = b.forward(c.x);
  EXPECT_EQ(0, std::memcmp(ya.hidden_states.data(), yb.hidden_states.data(), ya.hidden_states.nbytes()));
}

TEST(MoeWeights, MissingAndMisshapenTensorsAreNamed) {
  test::TestRng rng;
  const MoeCase c = test::random_moe_case("deepseek_v3", rng);
  const MoeConfig config = parse_moe_config(c.config);
  auto without = c.weights;
  std::erase_if(without, [](const auto& p) { return p.first == "experts.1.down_proj.weight"; });
  EXPECT_NE(load_error(without, config).find("'experts.1.down_proj.weight' not found"), std::string::npos);

  auto no_bias = c.weights;
  std::erase_if(no_bias, [](const auto& p) { return p.first == "gate.e_score_correction_bias"; });
  EXPECT_NE(load_error(no_bias, config).find("e_score_correction_bias"), std::string::npos);

  auto misshapen = c.weights;
  for (auto& [name, t] : misshapen)
    if (name == "experts.0.up_proj.weight") t = rng.normal_tensor({3, 5});
  const std::string error = load_error(misshapen, config);
  EXPECT_NE(error.find("experts.0.up_proj.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("[3, 5]"), std::string::npos) << error;

  auto fp8 = c.weights;
  for (auto& [name, t] : fp8)
    if (name == "gate.weight") t = t.to(DType::F8_E4M3);
  EXPECT_NE(load_error(fp8, config).find("F8_E4M3"), std::string::npos);

  EXPECT_NE(load_error(test::prefixed(c.weights, "model.layers.3.mlp."), config, "model.layers.4.mlp.")
                .find("is the block prefix 'model.layers.4.mlp.' right?"),
            std::string::npos);
}

TEST(MoeWeights, MixtralNamesAndQwen2SharedGate) {
  test::TestRng rng;
  for (const char* type : {"mixtral", "qwen2_moe"}) {
    const MoeCase c = test::random_moe_case(type, rng);
    const MoeConfig config = parse_moe_config(c.config);
    test::TempDir dir;
    const MoeWeights w = test::load_case_weights(c, config, dir.path());
    EXPECT_EQ(static_cast<int>(w.experts.size()), config.router.n_experts);
    const bool mixtral = config.naming == ExpertNaming::w1_w3_w2;
    EXPECT_EQ(mixtral, std::string(type) == "mixtral");
    // gate is w1 and up is w3 for Mixtral (w3 is not the down projection).
    const Tensor want_up = c.weight(mixtral ? "experts.0.w3.weight" : "experts.0.up_proj.weight");
    EXPECT_EQ(0, std::memcmp(w.experts[0].up.data(), want_up.data(), want_up.nbytes()));
    EXPECT_EQ(w.shared_gate.defined(), config.shared == SharedExpertKind::sigmoid_gated);
  }
}

}  // namespace
}  // namespace moe
