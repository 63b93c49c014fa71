// Writes the generated part of the seed corpora (MOE_FUZZ=ON builds it as fuzz_make_seeds):
//   fuzz_make_seeds tests/fuzz/corpus
// safetensors/: small files of every dtype (with metadata, an empty tensor, a scalar);
// layer_input/: for every model family, its fixture config.json (tests/data/models) shrunk to hidden 8,
// 4 experts of intermediate 4, top-2, with random weights and 3 tokens of hidden states.
// The other corpora are copies of tests/data files (scripts/fuzz.sh --seeds copies them).
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "moe/core/safetensors.h"
#include "moe/layer/random_weights.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace moe;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string safetensors_bytes(const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  const fs::path path = fuzz::scratch_dir() / "seed.safetensors";
  write_safetensors(path, tensors, metadata);
  return read(path);
}

void make_safetensors_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const float values[8] = {1.5f, -2, 0.25f, 3, -0.5f, 7, 0, 1};
  const Tensor f32 = Tensor::from_f32({2, 4}, values);
  fuzz::write_file(dir / "f32_bf16_metadata.safetensors",
                   safetensors_bytes({{"weight", f32}, {"bias", f32.to(DType::BF16).reshape({8})}}, {{"format", "pt"}}));
  std::vector<std::pair<std::string, Tensor>> every;
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::I8, DType::U8, DType::I32, DType::I64})
    every.emplace_back(std::string(dtype_name(t)), Tensor::zeros(t, {2, 3}));
  every.emplace_back("empty", Tensor::zeros(DType::F32, {0, 5}));
  every.emplace_back("scalar", Tensor::zeros(DType::F32, {}));
  fuzz::write_file(dir / "every_dtype.safetensors", safetensors_bytes(every));
}

void make_layer_seeds(const fs::path& dir, const fs::path& models) {
  fs::create_directories(dir);
  int family = 0;
  for (const char* name : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3"}) {
    json c = json::parse(read(models / name / "config.json"));
    c["hidden_size"] = 8;
    for (const char* key : {"intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"})
      if (c.contains(key)) c[key] = 4;
    for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"})
      if (c.contains(key)) c[key] = 4;
    c["num_experts_per_tok"] = 2;
    if (c.contains("n_group")) c["n_group"] = 2;
    if (c.contains("topk_group")) c["topk_group"] = 1;
    const MoeConfig config = parse_moe_config(c);
    const DType dtype = family % 2 == 0 ? DType::BF16 : DType::F32;
    const MoeWeights w = random_moe_weights(config, 17 + family, dtype);
    std::vector<std::pair<std::string, Tensor>> tensors = {{"gate.weight", w.router}};
    if (w.correction_bias.defined()) tensors.emplace_back("gate.e_score_correction_bias", w.correction_bias);
    const bool mixtral = config.naming == ExpertNaming::w1_w3_w2;
    for (size_t e = 0; e < w.experts.size(); ++e) {
      const std::string p = fmt::format("experts.{}.", e);
      tensors.emplace_back(p + (mixtral ? "w1" : "gate_proj") + ".weight", w.experts[e].gate);
      tensors.emplace_back(p + (mixtral ? "w3" : "up_proj") + ".weight", w.experts[e].up);
      tensors.emplace_back(p + (mixtral ? "w2" : "down_proj") + ".weight", w.experts[e].down);
    }
    const std::string shared = config.shared == SharedExpertKind::plain ? "shared_experts." : "shared_expert.";
    if (config.shared != SharedExpertKind::none) {
      tensors.emplace_back(shared + "gate_proj.weight", w.shared.gate);
      tensors.emplace_back(shared + "up_proj.weight", w.shared.up);
      tensors.emplace_back(shared + "down_proj.weight", w.shared.down);
    }
    if (w.shared_gate.defined()) tensors.emplace_back("shared_expert_gate.weight", w.shared_gate);
    const Tensor x = random_tensor({3, 8}, 1.0f, 5 + family, family % 3 == 0 ? DType::F32 : DType::BF16);
    const std::string flags(1, static_cast<char>(family * 3 % 16));
    const std::string sep(fuzz::kPartSeparator);
    fuzz::write_file(dir / fmt::format("{}.bin", name),
                     flags + c.dump(1) + sep + safetensors_bytes(tensors) + sep + safetensors_bytes({{"hidden_states", x}}));
    ++family;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  const fs::path corpus = argv[1];
  make_safetensors_seeds(corpus / "safetensors");
  make_layer_seeds(corpus / "layer_input", fs::path(MOE_TEST_DATA) / "models");
  return 0;
}
