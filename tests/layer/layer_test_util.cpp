#include "layer_test_util.h"

#include <atomic>
#include <random>

#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"

namespace moe::test {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("moe-layer-test-" + std::to_string(std::random_device{}()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

MoeWeights load_case_weights(const MoeCase& c, const MoeConfig& config, const std::filesystem::path& dir) {
  const auto file = dir / "weights.safetensors";
  write_safetensors(file, c.weights);
  return load_moe_weights(Checkpoint::open(file), "", config);
}

}  // namespace moe::test
