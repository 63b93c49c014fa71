#pragma once
// One MoE layer: its config, its weights (from a checkpoint or random), the CPU or CUDA stages.

#include "moe/layer/moe_layer.h"  // IWYU pragma: export
#include "moe/layer/random_weights.h"  // IWYU pragma: export
#include "moe/layer/cuda_stages.h"  // IWYU pragma: export
