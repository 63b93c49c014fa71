// The named shapes are the published config.json files' architecture keys (Hugging Face Hub:
// Qwen/Qwen3-30B-A3B, mistralai/Mixtral-8x7B-v0.1, deepseek-ai/DeepSeek-V2-Lite), kept as data here so that
// the bench needs no file beside the binary.
#include "bench/random_model_shapes.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moe/core/check.h"

namespace moe::cli {

namespace {

struct NamedShape {
  const char* name;
  const char* config;  // config.json
};

constexpr NamedShape kShapes[] = {
    {"qwen3-30b-a3b", R"({
      "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
      "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
      "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
      "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
      "rope_theta": 1000000.0, "rope_scaling": null, "attention_bias": false, "use_sliding_window": false,
      "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645})"},
    {"mixtral-8x7b", R"({
      "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
      "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
      "sliding_window": null, "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1,
      "eos_token_id": 2})"},
    {"deepseek-v2-lite", R"({
      "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
      "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2,
      "n_routed_experts": 64, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
      "norm_topk_prob": false, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "topk_method": "greedy",
      "n_group": 1, "topk_group": 1, "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
      "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
      "rms_norm_eps": 1e-06, "rope_theta": 10000, "attention_bias": false, "tie_word_embeddings": false,
      "hidden_act": "silu", "bos_token_id": 100000, "eos_token_id": 100001,
      "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 0.707,
                       "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}})"},
};

}  // namespace

std::vector<std::string> random_model_names() {
  std::vector<std::string> names;
  for (const NamedShape& s : kShapes) names.emplace_back(s.name);
  return names;
}

model::ModelConfig random_model_config(const std::string& name_or_file) {
  for (const NamedShape& s : kShapes)
    if (name_or_file == s.name) return model::parse_model_config(nlohmann::json::parse(s.config), nullptr);
  const std::filesystem::path path(name_or_file);
  std::error_code error;
  MOE_CHECK(std::filesystem::is_regular_file(path, error),
            "--random-model '{}': neither a named shape ({}) nor a config.json file", name_or_file,
            fmt::join(random_model_names(), ", "));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  MOE_CHECK(in.good() || in.eof(), "--random-model '{}': cannot read the file", name_or_file);
  const nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, false);
  MOE_CHECK(!config.is_discarded() && config.is_object(),
            "--random-model '{}': not a JSON object (expected a Hugging Face config.json)", name_or_file);
  return model::parse_model_config(config, nullptr);
}

}  // namespace moe::cli
