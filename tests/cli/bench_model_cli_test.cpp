// `moe bench --model DIR` on a transformers fixture: prefill and decode lines with positive speeds and
// floors, the time of each part, and a clear error for a directory without a model.
#include <gtest/gtest.h>
#include <sys/wait.h>

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

}  // namespace
}  // namespace moe::test
