// End-to-end: `mpirun -np 3|4 moe generate --ep --eplb-interval-steps N` on a skewed workload (prompts of
// repeated tokens, so that a few experts per layer take most pairs): the epoch advances, the rank max/mean
// load after each switch is predicted lower than before, and every output is bit-identical to one process:
// the same generated ids and the same routing trace, router weights included (which any difference in a
// hidden state's last bit would change in a later layer). Then `moe stats plot` draws the epochs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mpirun.h"
#include "run_command.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModels = fs::path(MOE_TEST_DATA) / "models";

// The generated ids of each --json line.
std::vector<json> generated(const fs::path& file) {
  std::vector<json> out;
  std::istringstream in(read_file(file));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line).at("generated_ids"));
  return out;
}

double max_over_mean(const std::vector<double>& loads) {
  double total = 0, top = 0;
  for (double l : loads) total += l, top = std::max(top, l);
  return top / (total / static_cast<double>(loads.size()));
}

TEST(GenerateEplbCli, RebalancingKeepsOutputsBitIdentical) {
  TempDir dir;
  for (const std::string family : {"qwen3_moe", "deepseek_v3"}) {
    SCOPED_TRACE(family);
    const std::string args =
        " generate --model " + (kModels / family).string() +
        " --prompt-ids 7,7,7,7,7,7,7,7,7,7,7,7 --prompt-ids 7,7,7,7,3 --prompt-ids 11,11,11"
        " --max-new-tokens 12 --cpu-experts reference";
    const auto single =
        run_command(dir.path(), std::string(MOE_BINARY) + args + " --json " + (dir / "one.json").string() +
                                    " --trace-routing " + (dir / "one.jsonl").string() + " >/dev/null");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    ASSERT_EQ(generated(dir / "one.json").at(0).size(), 3u);
    for (int ranks : {3, 4}) {
      SCOPED_TRACE(fmt::format("{} ranks", ranks));
      const fs::path stats = dir / "stats.json";
      const auto ep = run_command(dir.path(), mpirun(ranks) + MOE_BINARY + args +
                                                  " --ep --eplb-interval-steps 2 --eplb-window-steps 2" +
                                                  " --num-redundant-experts 2 --eplb-min-gain 0.01 --json " +
                                                  (dir / "ep.json").string() + " --trace-routing " +
                                                  (dir / "ep.jsonl").string() + " --stats " + stats.string() +
                                                  " >/dev/null");
      ASSERT_EQ(ep.exit_code, 0) << ep.err;
      EXPECT_EQ(generated(dir / "ep.json"), generated(dir / "one.json"));
      EXPECT_EQ(read_file(dir / "ep.jsonl"), read_file(dir / "one.jsonl"));

      const json epochs = json::parse(read_file(stats)).at("ep").at("epochs");
      ASSERT_GE(epochs.size(), 1u);
      for (size_t i = 0; i < epochs.size(); ++i) {
        EXPECT_EQ(epochs[i].at("epoch").get<int>(), static_cast<int>(i) + 1);
        EXPECT_GT(epochs[i].at("moved_experts").get<int>(), 0);
        EXPECT_GT(epochs[i].at("bytes_moved").get<int64_t>(), 0);
        for (const auto& [layer, loads] : epochs[i].at("layers").items()) {
          const auto before = loads.at("before").get<std::vector<double>>();
          const auto after = loads.at("after").get<std::vector<double>>();
          ASSERT_EQ(before.size(), static_cast<size_t>(ranks));
          EXPECT_LE(max_over_mean(after), max_over_mean(before) - 0.01) << "layer " << layer;
          // The window is the interval: the pairs served in it are the pairs it counted, and where the old
          // placement has no replicas (contiguous, at 4 ranks, before the first switch) rank by rank.
          const auto served = loads.at("served_before").get<std::vector<int64_t>>();
          ASSERT_EQ(served.size(), static_cast<size_t>(ranks));
          EXPECT_DOUBLE_EQ(std::accumulate(served.begin(), served.end(), 0.0),
                           std::accumulate(before.begin(), before.end(), 0.0));
          if (ranks == 4 && i == 0)
            for (int r = 0; r < ranks; ++r) EXPECT_EQ(static_cast<double>(served[r]), before[r]) << "rank " << r;
          if (i + 1 < epochs.size()) EXPECT_EQ(loads.at("served_after").size(), static_cast<size_t>(ranks));
        }
      }
      const auto plot = run_command(dir.path(), std::string(MOE_BINARY) + " stats plot " + stats.string() +
                                                    " --out " + (dir / "p.svg").string());
      ASSERT_EQ(plot.exit_code, 0) << plot.err;
      EXPECT_NE(read_file(dir / "p.svg").find("epoch 1: per-rank load before"), std::string::npos);
    }
  }
}

TEST(GenerateEplbCli, OptionsRefusedWhereTheyCannotWork) {
  TempDir dir;
  const std::string model = " generate --model " + (kModels / "olmoe").string() + " --prompt-ids 1,2 ";
  auto r = run_command(dir.path(), std::string(MOE_BINARY) + model + "--eplb-interval-steps 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--eplb-interval-steps need --ep"), std::string::npos) << r.err;
  r = run_command(dir.path(), std::string(MOE_BINARY) + model + "--num-redundant-experts 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--eplb-interval-steps"), std::string::npos) << r.err;
  r = run_command(dir.path(),
                  mpirun(2) + MOE_BINARY + model + "--ep --eplb-interval-steps 2 --ep-transfer bf16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("error: --eplb-interval-steps keeps outputs bit-identical"), std::string::npos)
      << r.err;
  // olmoe's fixture: 8 experts on 2 ranks hold at most 8 replicas.
  r = run_command(dir.path(),
                  mpirun(2) + MOE_BINARY + model + "--ep --eplb-interval-steps 2 --num-redundant-experts 9");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("error: --num-redundant-experts 9: 8 experts on 2 ranks"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moe::test
