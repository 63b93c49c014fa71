// `moe generate --backend cuda` end to end (the whole decoder on the GPU through the engine) on the Mixtral
// fixture, whose greedy continuation the GPU decoder matches at every step (cuda_model_test.cpp prints the
// count for each family): the CLI's tokens must equal transformers'.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model_fixture.h"
#include "cuda/device_info.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

TEST(GenerateCudaCli, GreedyTokensEqualTransformersOnMixtral) {
  if (cuda::visible_gpus().empty()) GTEST_SKIP() << "no GPU";
  const Fixture fixture = load_fixture("mixtral");
  const TempDir temp;
  for (const FixtureCase& c : fixture.cases) {
    std::ostringstream ids;
    for (size_t i = 0; i < c.ids.size(); ++i) ids << (i ? "," : "") << c.ids[i];
    const std::filesystem::path json = temp / "out.json";
    // MOE_BINARY in the environment overrides the build path (the device runs a carried copy).
    const char* binary = std::getenv("MOE_BINARY") ? std::getenv("MOE_BINARY") : MOE_BINARY;
    const std::string command = std::string(binary) + " generate --model " + fixture.dir.string() +
                                " --backend cuda --prompt-ids " + ids.str() + " --max-new-tokens " +
                                std::to_string(c.generated.size()) + " --json " + json.string() +
                                " > /dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(json);
    const nlohmann::json out = nlohmann::json::parse(in);
    EXPECT_EQ(out.at("generated_ids").get<std::vector<int32_t>>(), c.generated) << "prompt: " << c.text;
  }
}

}  // namespace
}  // namespace moe::test
