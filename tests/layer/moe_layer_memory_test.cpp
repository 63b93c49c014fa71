// The README's memory promise: the fast CPU experts pack a checkpoint's expert weights into their own layout
// and then drop the checkpoint mapping's pages of those experts, so that a loaded layer does not keep both
// copies resident. Read from /proc/self/smaps: the resident bytes of the checkpoint file's mapping.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "layer_test_util.h"
#include "moe/layer/moe_layer.h"

namespace moe {
namespace {

struct MappingBytes {
  int64_t size = 0;      // mapped
  int64_t resident = 0;  // Rss
};

// The mapping(s) of `file` in this process, summed, from /proc/self/smaps (sizes are in kB there).
MappingBytes mapping_of(const std::filesystem::path& file) {
  const std::string name = std::filesystem::canonical(file).string();
  std::ifstream smaps("/proc/self/smaps");
  MappingBytes bytes;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first.find('-') != std::string::npos && first.back() != ':') {  // a mapping's header line
      inside = line.size() >= name.size() && line.ends_with(name);
      continue;
    }
    int64_t kb = 0;
    if (inside && (first == "Size:" || first == "Rss:") && fields >> kb)
      (first == "Size:" ? bytes.size : bytes.resident) += kb * 1024;
  }
  return bytes;
}

TEST(MoeLayerMemory, PackedExpertsDropTheCheckpointPages) {
  test::TestRng rng;
  // 8 experts of H 1024, I 512 in BF16: 24 MiB of expert weights, 768 KiB (192 pages) a matrix.
  test::MoeCase c =
      test::random_moe_case("qwen3_moe", rng, {.weight_dtype = DType::BF16, .experts = 8, .top_k = 2});
  c.config["hidden_size"] = 1024;
  c.config["num_attention_heads"] = 8;
  c.config["head_dim"] = 128;
  c.config["moe_intermediate_size"] = 512;
  c.weights = test::random_moe_weights(c.config, rng, DType::BF16);
  c.x = rng.normal_tensor({3, 1024});
  const MoeConfig config = parse_moe_config(c.config);
  test::TempDir dir;
  MoeLayer layer(config, test::load_case_weights(c, config, dir.path()), {});

  const MappingBytes mapped = mapping_of(dir / "weights.safetensors");
  ASSERT_GT(mapped.size, int64_t{24} << 20) << "the checkpoint is not mapped";
  // Packing read every page of the experts; what stays resident is the router and the pages that the
  // experts share with their neighbours at the edges.
  EXPECT_LT(mapped.resident, mapped.size / 10) << "resident " << mapped.resident << " of " << mapped.size;

  // The pages dropped were the checkpoint's, not what the layer runs on.
  const LayerOutput out = layer.forward(c.x);
  for (int64_t i = 0; i < out.hidden_states.numel(); ++i)
    ASSERT_TRUE(std::isfinite(out.hidden_states.data_as<float>()[i]));
}

}  // namespace
}  // namespace moe
