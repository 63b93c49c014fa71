#pragma once
// Helpers shared by the layer tests: a temporary directory, and loading a random case through the real
// checkpoint path.

#include <filesystem>
#include <string>

#include "moe/layer/moe_layer.h"
#include "random_moe_case.h"

namespace moe::test {

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Writes the case's weights to a safetensors file in `dir` and loads them back as the engine does.
MoeWeights load_case_weights(const MoeCase& c, const MoeConfig& config, const std::filesystem::path& dir);

}  // namespace moe::test
