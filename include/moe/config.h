#pragma once
// A HuggingFace config.json as the decoder (model::ModelConfig) and its MoE part (MoeConfig).

#include "moe/model/model_config.h"  // IWYU pragma: export
#include "moe/layer/moe_config.h"  // IWYU pragma: export
