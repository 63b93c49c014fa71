// `moe quantize` end to end: the binary writes a checkpoint that `moe generate` then loads and runs, prints
// its report and writes it as JSON; bad input is one "error:" line and exit 2, with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run_command.h"
#include "temp_dir.h"

#ifndef MOE_BINARY
#error "MOE_BINARY must name the moe executable (set by tests/quant/CMakeLists.txt)"
#endif

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModels = fs::path(MOE_TEST_DATA) / "models";

struct Output {
  CommandResult result;
  std::string out;
};

Output moe(const TempDir& dir, const std::string& args) {
  const fs::path out_file = dir / "stdout.txt";
  Output o;
  o.result = run_command(dir.path(), "(" MOE_BINARY " " + args + " >" + out_file.string() + ")");
  o.out = read_file(out_file);
  return o;
}

TEST(QuantizeCli, WritesReportsAndTheCheckpointRuns) {
  TempDir dir;
  std::ofstream(dir / "prompts.txt") << "The quick brown fox jumps over the lazy dog.\n\nHello, world!\n";
  const Output q = moe(dir, "quantize --model " + (kModels / "deepseek_v3").string() + " --to fp8 --out " +
                                (dir / "fp8").string() + " --calibration " + (dir / "prompts.txt").string() +
                                " --report " + (dir / "report.json").string());
  ASSERT_EQ(q.result.exit_code, 0) << q.result.err << q.out;
  EXPECT_NE(q.out.find("top-k flip rate"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("greedy next-token agreement"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("moe plan --dtype fp8 estimates"), std::string::npos) << q.out;
  const json report = json::parse(read_file(dir / "report.json"));
  EXPECT_EQ(report["method"], "fp8");
  EXPECT_EQ(report["calibration"]["prompts"], 2);  // the blank line is not a prompt
  EXPECT_EQ(report["weight_errors"].size(), 2u * (16 + 1));  // two MoE layers of 16 experts + the shared one

  const Output g = moe(dir, "generate --model " + (dir / "fp8").string() + " --prompt-ids 1,2,3 --max-new-tokens 4");
  EXPECT_EQ(g.result.exit_code, 0) << g.result.err;

  // moe plan sets the stored bytes beside its fp8 estimate: within 1% (the fixture's matrices are smaller
  // than one 128x128 block, so the estimate's whole-block scales differ slightly).
  const Output p = moe(dir, "plan --config " + (dir / "fp8" / "config.json").string() +
                                " --ranks 1 --device-memory 141GiB --max-batched-tokens 16 --dtype fp8 --model " +
                                (dir / "fp8").string());
  ASSERT_EQ(p.result.exit_code, 0) << p.result.err;
  const size_t at = p.out.find("the plan's slots: ");
  ASSERT_NE(at, std::string::npos) << p.out;
  const size_t comma = p.out.find(", ", at + 18);
  const double percent = std::stod(p.out.substr(comma + 2));
  EXPECT_LT(std::fabs(percent), 1.0) << p.out;
}

TEST(QuantizeCli, BadInputIsOneErrorLine) {
  TempDir dir;
  const std::string model = " --model " + (kModels / "olmoe").string();
  const auto expect_error = [&](const std::string& args, const std::string& says) {
    const Output o = moe(dir, "quantize" + args);
    EXPECT_EQ(o.result.exit_code, 2) << args;
    // The last line of stderr (progress lines may come before it) is the one error line.
    const std::string err = o.result.err.substr(0, o.result.err.find_last_not_of('\n') + 1);
    const std::string last = err.substr(err.find_last_of('\n') == std::string::npos ? 0 : err.find_last_of('\n') + 1);
    EXPECT_EQ(last.rfind("error: ", 0), 0u) << args << "\n" << o.result.err;
    EXPECT_NE(last.find(says), std::string::npos) << args << "\n" << o.result.err;
  };
  expect_error(model + " --to int8 --out " + (dir / "o").string(), "--to");
  expect_error(model + " --to fp8 --out " + (kModels / "olmoe" / "q").string(), "inside the model directory");
  expect_error(model + " --to fp8 --out " + (dir / "o").string() + " --calibration " + (dir / "none.txt").string(),
               "cannot open the calibration file");
  expect_error(model + " --to int4 --out " + (dir / "o").string(), "group size 128 must divide");
  EXPECT_FALSE(fs::exists(dir / "o"));
  EXPECT_FALSE(fs::exists(kModels / "olmoe" / "q"));
}

}  // namespace
}  // namespace moe::test
