// `moe bench --model DIR` on a transformers fixture: prefill and decode lines with positive speeds and
// floors, the time of each part, and a clear error for a directory without a model.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "temp_dir.h"

namespace moe::test {
namespace {

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

RunResult run_bench(const TempDir& dir, const std::string& args) {
  const std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  const int status = std::system((std::string(MOE_BINARY) + " bench " + args + " >" + out + " 2>" + err).c_str());
  return {status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_all(out), read_all(err)};
}

TEST(BenchModelCli, PrintsPrefillDecodeFloorsAndParts) {
  TempDir dir;
  const RunResult r = run_bench(dir, std::string("--model ") + MOE_TEST_DATA + "/models/qwen3_moe " +
                                         "--prompt-tokens 8 --decode-tokens 2 --repeats 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  SCOPED_TRACE(r.out);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(prefill: ([0-9.]+) tokens/s .*floor ([0-9.e+-]+) s)")));
  EXPECT_GT(std::stod(m[1]), 0.0);
  EXPECT_GT(std::stod(m[2]), 0.0);
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(decode: ([0-9.]+) tokens/s .*floor ([0-9.e+-]+) ms)")));
  EXPECT_GT(std::stod(m[1]), 0.0);
  EXPECT_GT(std::stod(m[2]), 0.0);
  for (const char* part : {"prefill ms/token: attention projections", "decode ms/token: attention projections",
                           "attention core", "lm_head", "MoE"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part;
}

TEST(BenchModelCli, MissingModelIsAClearError) {
  TempDir dir;
  const RunResult r = run_bench(dir, "--model " + (dir / "nothing").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nothing' does not exist"), std::string::npos) << r.err;
}

// Batch sizes are the GPU's model bench's: the CPU's refuses them rather than timing one sequence.
TEST(BenchModelCli, BatchSizesOnTheCpuAreAClearError) {
  TempDir dir;
  const RunResult r = run_bench(dir, std::string("--model ") + MOE_TEST_DATA + "/models/qwen3_moe --batch 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--batch is the GPU's"), std::string::npos) << r.err;
}

// --random-model: a bad name, a missing or malformed file, a config the decoder refuses, or the CPU backend
// is one error line and exit 2, before any GPU work (so in a build without CUDA too).
TEST(BenchModelCli, BadRandomModelsAreOneErrorLine) {
  TempDir dir;
  const std::filesystem::path bad_json = dir / "bad.json", bad_type = dir / "config.json";
  std::ofstream(bad_json) << "{ not json";
  std::ofstream(bad_type) << R"({"model_type": "gpt2", "hidden_size": 64})";
  const std::pair<std::string, std::string> cases[] = {
      {"--random-model qwen9 --backend cuda",
       "neither a named shape (qwen3-30b-a3b, mixtral-8x7b, deepseek-v2-lite)"},
      {"--random-model " + (dir / "none.json").string() + " --backend cuda", "nor a config.json file"},
      {"--random-model " + bad_json.string() + " --backend cuda", "not a JSON object"},
      {"--random-model " + bad_type.string() + " --backend cuda", "gpt2"},
      {"--random-model qwen3-30b-a3b", "add --backend cuda"},
      {"--random-model qwen3-30b-a3b --backend cuda --model " + (dir / "m").string(), "give one"},
  };
  for (const auto& [args, message] : cases) {
    const RunResult r = run_bench(dir, args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_TRUE(r.err.starts_with("error: ")) << args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace moe::test
