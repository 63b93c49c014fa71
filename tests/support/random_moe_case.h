#pragma once
// Random MoE blocks for end-to-end tests: a realistic HF config.json of one model family with small random
// sizes, the block's weights under their block-relative HF names, and an input x.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "moe/core/tensor.h"
#include "test_random.h"

namespace moe::test {

// The model families random_moe_case knows.
inline constexpr const char* kMoeModelTypes[] = {"mixtral", "qwen2_moe",   "qwen3_moe",
                                                 "olmoe",   "deepseek_v2", "deepseek_v3"};

struct CaseOptions {
  DType weight_dtype = DType::F32;  // every weight except e_score_correction_bias (always F32)
  DType input_dtype = DType::F32;
  int64_t tokens = 0;   // T; 0: random in [1, 40]
  int64_t experts = 0;  // E; 0: random from {3, 4, 5, 6, 8, 12, 16}
  int64_t top_k = 0;    // k; 0: random in [1, min(E, 8)]
};

struct MoeCase {
  nlohmann::json config;                                // config.json
  std::vector<std::pair<std::string, Tensor>> weights;  // block-relative names ("gate.weight", ...)
  Tensor x;                                             // [T, H]

  // The weight called `name` (block-relative); an undefined tensor when absent.
  Tensor weight(const std::string& name) const;
};

// A random config of `model_type` (sizes: H in [8, 96], I in [4, 64]; random norm_topk_prob, scaling
// factor, shared expert sizes, groups valid for DeepSeek), its weights and an input.
MoeCase random_moe_case(const std::string& model_type, TestRng& rng, const CaseOptions& opt = {});

// Fresh random weights for `config` (as written by random_moe_case): lets two blocks share one config.
std::vector<std::pair<std::string, Tensor>> random_moe_weights(const nlohmann::json& config, TestRng& rng,
                                                               DType weight_dtype);

// The weights with `prefix` prepended to every name ("model.layers.3.mlp.").
std::vector<std::pair<std::string, Tensor>> prefixed(
    const std::vector<std::pair<std::string, Tensor>>& weights, const std::string& prefix);

// Writes dir/config.json, dir/weights.safetensors (names prefixed with `prefix`) and dir/input.safetensors
// (one tensor, `hidden_states`). Creates `dir` if needed.
void write_case(const std::filesystem::path& dir, const MoeCase& moe_case, const std::string& prefix = "");

}  // namespace moe::test
