// `mpirun -np 2 moe bench --dispatch` on tiny sizes: rank 0's JSON has every figure, positive, and the
// byte counts agree with the wire formats; one rank is refused clearly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_command.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;

std::string bench_dispatch(int ranks, const std::string& args) {
  // NOTE: one thread per rank: the ranks already share CI's two cores.
  return std::string(MOE_MPIEXEC) + " --oversubscribe --allow-run-as-root -x MOE_NUM_THREADS=1 -np " +
         std::to_string(ranks) + " " + MOE_BINARY + " bench --dispatch " + args;
}

class BenchDispatchCli : public ::testing::Test {
 protected:
  TempDir temp_;
  const fs::path dir_ = temp_.path();
};

TEST_F(BenchDispatchCli, TwoRanksWriteEveryFigure) {
  const int64_t H = 256, k = 8;
  const fs::path json = dir_ / "dispatch.json";
  const CommandResult r = run_command(
      dir_,
      bench_dispatch(2, "--tokens 8,24 --hidden 256 --wire bf16,fp8 --repeats 3 --json " + json.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream file(json);
  const nlohmann::json rows = nlohmann::json::parse(file);
  ASSERT_EQ(rows.size(), 4u) << rows.dump(2);  // (8, bf16), (8, fp8), (24, bf16), (24, fp8)
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = rows[i];
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["ranks"], 2);
    EXPECT_EQ(row["tokens_per_rank"], i < 2 ? 8 : 24);
    EXPECT_EQ(row["wire"], i % 2 == 0 ? "bf16" : "fp8");
    EXPECT_EQ(row["H"], H);
    EXPECT_EQ(row["k"], k);
    for (const char* key : {"copies_per_token", "dispatch_us", "dispatch_bytes_per_rank", "dispatch_gbps",
                            "combine_us", "combine_bytes_per_rank", "combine_gbps", "dispatch_ratio_to_peer",
                            "combine_ratio_to_peer", "max_rss_mib"}) {
      ASSERT_TRUE(row.contains(key) && row[key].is_number()) << key;
      EXPECT_GT(row[key].get<double>(), 0.0) << key;
    }
    for (const char* key : {"dispatch_us", "dispatch_gbps", "combine_us", "combine_gbps"})
      EXPECT_GT(row["peer"][key].get<double>(), 0.0) << "peer " << key;
    EXPECT_LE(row["copies_per_token"].get<double>(), 2.0);
    // Combine sends fp32 rows only: whole rows, summed over ranks.
    const double combine_rows = row["combine_bytes_per_rank"].get<double>() * 2 / (4 * H);
    EXPECT_EQ(combine_rows, std::floor(combine_rows));
  }
  // The same routing under both wires: dispatch bytes scale with the row + (slot, weight) pair sizes.
  for (size_t i = 0; i < rows.size(); i += 2) {
    const double bf16 = rows[i]["dispatch_bytes_per_rank"], fp8 = rows[i + 1]["dispatch_bytes_per_rank"];
    EXPECT_DOUBLE_EQ(bf16 / (2 * H + 8 * k), fp8 / (H + 4 * H / 128 + 8 * k));
    EXPECT_EQ(rows[i]["combine_bytes_per_rank"], rows[i + 1]["combine_bytes_per_rank"]);
  }
}

TEST_F(BenchDispatchCli, OneRankIsRefused) {
  const CommandResult r = run_command(dir_, bench_dispatch(1, "--tokens 8 --hidden 128 --repeats 3"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("R >= 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moe::test
