#pragma once
// The MoE part of a HuggingFace config.json, for the model families this engine runs. Keys, aliases and
// defaults follow transformers 5.x (configuration_<family>.py). Each family's MoE keys are data here
// (moe_config.cpp's rules table), so that the MoE layer reads a config.json with nothing above layer/; the
// rest of a family (attention, tensor names) is its file under model/families/.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "moe/quant/quant_scheme.h"
#include "moe/routing/router.h"

namespace moe {

enum class SharedExpertKind : uint8_t {
  none,
  plain,          // DeepSeek: n_shared_experts fused into one MLP, added unweighted
  sigmoid_gated,  // Qwen2-MoE: sigmoid(x · shared_expert_gateᵀ) · shared_expert(x)
};

enum class ExpertNaming : uint8_t {
  gate_up_down,  // experts.{e}.gate_proj / up_proj / down_proj
  w1_w3_w2,      // Mixtral: experts.{e}.w1 (gate) / w3 (up) / w2 (down)
};

// Which decoder layers hold a MoE block (is_moe_layer); the others hold a dense MLP.
enum class MoeLayerPattern : uint8_t {
  all,
  after_first_k_dense,  // DeepSeek: layers >= first_k_dense_replace
  sparse_step,          // Qwen2/3-MoE: (layer + 1) % decoder_sparse_step == 0, except mlp_only_layers
};

struct MoeConfig {
  std::string model_type;
  std::string intermediate_key;  // the config.json key of expert_intermediate_size (OLMoE: intermediate_size)
  int64_t hidden_size = 0;
  int64_t expert_intermediate_size = 0;
  routing::RouterConfig router;
  bool router_has_correction_bias = false;  // gate.e_score_correction_bias (DeepSeek-V3)
  SharedExpertKind shared = SharedExpertKind::none;
  int64_t shared_intermediate_size = 0;
  ExpertNaming naming = ExpertNaming::gate_up_down;
  // Which decoder layers hold a MoE block (the others a dense MLP).
  MoeLayerPattern layers = MoeLayerPattern::all;
  int64_t num_hidden_layers = 0;
  int64_t first_k_dense_replace = 0;  // DeepSeek
  int64_t decoder_sparse_step = 1;    // Qwen2/3-MoE
  std::vector<int64_t> mlp_only_layers;
  // How the checkpoint's linear weights are stored (quantization_config); quantised ones are dequantised
  // at load (quant/linear_weight.h).
  quant::QuantScheme quant;
};

// The model types accepted, in the order the README lists them (model/family.h's registry holds the same).
const std::vector<std::string>& supported_model_types();

// Parses and validates (routing keys, hidden_act == silu, sizes > 0). Errors name the key and the fix;
// an unsupported model_type names the supported ones.
MoeConfig parse_moe_config(const nlohmann::json& hf_config);
MoeConfig load_moe_config(const std::filesystem::path& config_json);

// Whether decoder layer `layer_index` (0-based) holds a MoE block under this config.
bool is_moe_layer(const MoeConfig& config, int64_t layer_index);

}  // namespace moe
