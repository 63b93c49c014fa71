#pragma once
// The model shapes `moe bench --random-model` builds with random weights: a named one (the published
// config.json of Qwen3-30B-A3B, Mixtral-8x7B, DeepSeek-V2-Lite, full depth) or an HF config.json file.

#include <string>
#include <vector>

#include "moe/model/model_config.h"

namespace moe::cli {

// The names random_model_config takes, for help and errors.
std::vector<std::string> random_model_names();

// The config of NAME or of the config.json at that path. Throws moe::Error for a name that is neither
// (listing the names), an unreadable or malformed file, or a config the decoder does not take.
model::ModelConfig random_model_config(const std::string& name_or_file);

}  // namespace moe::cli
