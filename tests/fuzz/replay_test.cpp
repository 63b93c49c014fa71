// Replays every committed fuzz input through its target in the normal build: the seed corpora
// (tests/fuzz/corpus/<name>) and the inputs that once crashed a target (tests/fuzz/regressions/<name>,
// each fixed since). A crash, a sanitizer report or an exception other than moe::Error fails the test.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>

#include "fuzz_target.h"

namespace moe::fuzz {
namespace {

using Target = int (*)(const uint8_t*, size_t);

const std::map<std::string, Target>& targets() {
  static const std::map<std::string, Target> all = {
      {"safetensors", fuzz_safetensors},         {"checkpoint_index", fuzz_checkpoint_index},
      {"moe_config", fuzz_moe_config},           {"model_config", fuzz_model_config},
      {"tokenizer_json", fuzz_tokenizer_json},   {"tokenizer_text", fuzz_tokenizer_text},
      {"layer_input", fuzz_layer_input},         {"chat_template", fuzz_chat_template}};
  return all;
}

// Runs every file of `dir` (if it exists) through `target`; returns how many ran.
int replay(const std::filesystem::path& dir, Target target) {
  if (!std::filesystem::is_directory(dir)) return 0;
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    ++count;
  }
  return count;
}

class FuzzReplay : public testing::TestWithParam<std::string> {};

TEST_P(FuzzReplay, SeedCorpusAndRegressionsRunClean) {
  const Target target = targets().at(GetParam());
  const std::filesystem::path root = MOE_FUZZ_DIR;
  EXPECT_GT(replay(root / "corpus" / GetParam(), target), 0) << "every fuzz target has a committed seed corpus";
  replay(root / "regressions" / GetParam(), target);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay,
                         testing::Values("safetensors", "checkpoint_index", "moe_config", "model_config",
                                         "tokenizer_json", "tokenizer_text", "layer_input", "chat_template"),
                         [](const auto& info) { return info.param; });

TEST(FuzzParts, SplitsOnTheSeparator) {
  const std::string input = std::string("a") + std::string(kPartSeparator) + "" + std::string(kPartSeparator) + "c";
  const std::vector<std::string_view> parts = split_parts(input);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], "a");
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[2], "c");
  EXPECT_EQ(split_parts("whole").size(), 1u);
}

}  // namespace
}  // namespace moe::fuzz
