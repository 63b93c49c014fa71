// `moe layer --backend cuda` against `moe layer --backend cpu --cpu-experts reference` on the same files.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cuda_test_util.h"
#include "moe/core/safetensors.h"
#include "moe/layer/random_weights.h"
#include "temp_dir.h"
#include "test_random.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, Tensor>> hf_tensors(const MoeConfig& config, const MoeWeights& w) {
  std::vector<std::pair<std::string, Tensor>> t = {{"gate.weight", w.router}};
  if (w.correction_bias.defined()) t.push_back({"gate.e_score_correction_bias", w.correction_bias});
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const std::string base = "experts." + std::to_string(e) + ".";
    t.push_back({base + "gate_proj.weight", w.experts[e].gate});
    t.push_back({base + "up_proj.weight", w.experts[e].up});
    t.push_back({base + "down_proj.weight", w.experts[e].down});
  }
  if (config.shared == SharedExpertKind::plain)
    for (auto [name, tensor] : {std::pair{"gate_proj", w.shared.gate}, {"up_proj", w.shared.up}, {"down_proj", w.shared.down}})
      t.push_back({std::string("shared_experts.") + name + ".weight", tensor});
  return t;
}

TEST(CudaLayerCli, AgreesWithTheCpuPath) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::TempDir temp;
  const fs::path& dir = temp.path();
  const nlohmann::json config_json = test::cuda_case_config("deepseek_v3", 256, 128, 64, 6);
  std::ofstream(dir / "config.json") << config_json.dump();
  const MoeConfig config = parse_moe_config(config_json);
  const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
  write_safetensors(dir / "w.safetensors", hf_tensors(config, weights));
  write_safetensors(dir / "x.safetensors", {{"hidden_states", rng.normal_tensor({45, 256}, 1.0f, DType::BF16)}});
  auto run = [&](const std::string& backend, const std::string& out) {
    // MOE_BINARY in the environment overrides the build path (the device runs a carried copy).
    const char* binary = std::getenv("MOE_BINARY") ? std::getenv("MOE_BINARY") : MOE_BINARY;
    const std::string command = std::string(binary) + " layer --config " + (dir / "config.json").string() +
                                " --weights " + (dir / "w.safetensors").string() + " --input " +
                                (dir / "x.safetensors").string() + " --output " + (dir / out).string() +
                                " --backend " + backend + (backend == "cpu" ? " --cpu-experts reference" : "");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  };
  run("cuda", "gpu.safetensors");
  run("cpu", "cpu.safetensors");
  const SafetensorsFile gpu = SafetensorsFile::open(dir / "gpu.safetensors"), cpu = SafetensorsFile::open(dir / "cpu.safetensors");
  const Tensor gy = gpu.get("hidden_states"), cy = cpu.get("hidden_states");
  const Tensor gi = gpu.get("topk_ids"), ci = cpu.get("topk_ids");
  ASSERT_EQ(gy.shape(), cy.shape());
  int64_t same = 0;
  double worst = 0, scale = 1e-30;
  for (int64_t t = 0; t < 45; ++t) {
    const bool agree = std::equal(gi.data_as<int32_t>() + t * 6, gi.data_as<int32_t>() + (t + 1) * 6, ci.data_as<int32_t>() + t * 6);
    same += agree;
    for (int64_t h = 0; h < 256; ++h) {
      const double g = gy.data_as<float>()[t * 256 + h], c = cy.data_as<float>()[t * 256 + h];
      ASSERT_FALSE(std::isnan(g));
      scale = std::max(scale, std::fabs(c));
      if (agree) worst = std::max(worst, std::fabs(g - c));
    }
  }
  EXPECT_GE(same, 44);
  EXPECT_LE(worst / scale, 1e-2);
}

}  // namespace
}  // namespace moe
