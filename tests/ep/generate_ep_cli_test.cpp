// End-to-end: `mpirun -np 2 moe generate --ep` on the transformers fixtures (tests/data/models). Every rank
// runs the model with its MoE blocks expert-parallel; rank 0 alone writes the outputs, and they must equal
// a single-process run: the same generated tokens (transformers' greedy continuation) and the same routing
// trace, line for line.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "mpirun.h"
#include "run_command.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModels = fs::path(MOE_TEST_DATA) / "models";

// The trace's lines without their weights (which a different summation order may change in the last bit).
std::vector<std::string> routing_lines(const fs::path& trace) {
  std::vector<std::string> lines;
  std::istringstream in(read_file(trace));
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    j.erase("weights");
    lines.push_back(j.dump());
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::string ids(const json& list) { return fmt::format("{}", fmt::join(list.get<std::vector<int>>(), ",")); }

TEST(GenerateEpCli, TwoRanksGiveTheTokensAndRoutingOfOne) {
  TempDir dir;
  for (const auto& entry : fs::directory_iterator(kModels)) {
    const std::string family = entry.path().filename().string();
    SCOPED_TRACE(family);
    const json reference = json::parse(read_file(entry.path() / "reference.json"));
    // deepseek_v3_fp8's reference is transformers' W8A8 run, which the dequantised weights may part from.
    if (reference.contains("fp8")) continue;
    const json& cases = reference.at("cases");
    const std::string args = " generate --model " + entry.path().string() + " --prompt-ids " +
                             ids(cases[0].at("ids")) + " --prompt-ids " + ids(cases[1].at("ids")) +
                             " --max-new-tokens 16 --cpu-experts reference";
    const auto single = run_command(dir.path(), std::string(MOE_BINARY) + args + " --json " +
                                                    (dir / "single.json").string() + " --trace-routing " +
                                                    (dir / "single.jsonl").string());
    ASSERT_EQ(single.exit_code, 0) << single.err;
    fs::remove(dir / "ep.json");
    fs::remove(dir / "ep.jsonl");
    const auto ep = run_command(dir.path(), mpirun(2) + MOE_BINARY + args + " --ep --json " +
                                                (dir / "ep.json").string() + " --trace-routing " +
                                                (dir / "ep.jsonl").string());
    ASSERT_EQ(ep.exit_code, 0) << ep.err;
    const json a = json::parse(read_file(dir / "single.json")), b = json::parse(read_file(dir / "ep.json"));
    EXPECT_EQ(b.at("generated_ids"), a.at("generated_ids"));
    for (size_t s = 0; s < 2; ++s) EXPECT_EQ(b.at("generated_ids")[s], cases[s].at("generated_ids")) << "sequence " << s;
    // Rank 0 alone wrote the trace: as many lines as one process, the same experts for every (token, layer).
    EXPECT_EQ(routing_lines(dir / "ep.jsonl"), routing_lines(dir / "single.jsonl"));
  }
}

TEST(GenerateEpCli, RefusesWhatItCannotRun) {
  TempDir dir;
  const std::string model = " generate --model " + (kModels / "qwen3_moe").string() + " --prompt-ids 1,2";
  // 16 experts do not split evenly over 3 ranks without a placement file.
  const auto uneven = run_command(dir.path(), mpirun(3) + MOE_BINARY + model + " --ep");
  EXPECT_NE(uneven.exit_code, 0);
  EXPECT_NE(uneven.err.find("error: "), std::string::npos) << uneven.err;
  EXPECT_NE(uneven.err.find("placement"), std::string::npos) << uneven.err;
  const auto fast = run_command(dir.path(), std::string(MOE_BINARY) + model + " --ep --cpu-experts fast");
  EXPECT_EQ(fast.exit_code, 2);
  EXPECT_NE(fast.err.find("--ep runs the MoE blocks on the CPU reference experts"), std::string::npos) << fast.err;
}

}  // namespace
}  // namespace moe::test
