#pragma once
// Helpers shared by the layer tests: loading a random case through the real checkpoint path (TempDir comes
// from temp_dir.h).

#include <filesystem>
#include <string>

#include "moe/layer/moe_layer.h"
#include "random_moe_case.h"
#include "temp_dir.h"

namespace moe::test {

// Writes the case's weights to a safetensors file in `dir` and loads them back as the engine does.
MoeWeights load_case_weights(const MoeCase& c, const MoeConfig& config, const std::filesystem::path& dir);

}  // namespace moe::test
