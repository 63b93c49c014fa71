#include "layer_test_util.h"

#include <atomic>
#include <random>

#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"

namespace moe::test {

MoeWeights load_case_weights(const MoeCase& c, const MoeConfig& config, const std::filesystem::path& dir) {
  const auto file = dir / "weights.safetensors";
  write_safetensors(file, c.weights);
  return load_moe_weights(Checkpoint::open(file), "", config);
}

}  // namespace moe::test
