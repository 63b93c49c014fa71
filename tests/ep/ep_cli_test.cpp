// End-to-end: `mpirun -np R moe layer --ep` against a single-rank `moe layer` run on the same files (rank 0
// writes the outputs; they must match), per-rank stats, placement files, and clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moe/core/safetensors.h"
#include "ep/placement.h"
#include "random_moe_case.h"
#include "run_command.h"
#include "temp_dir.h"
#include "test_random.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;

std::string mpirun(int ranks) {
  return std::string(MOE_MPIEXEC) + " --oversubscribe --allow-run-as-root -np " + std::to_string(ranks) + " ";
}

std::string layer(const fs::path& dir, const std::string& output, const std::string& extra = "") {
  return std::string(MOE_BINARY) + " layer --config " + (dir / "config.json").string() + " --weights " +
         (dir / "weights.safetensors").string() + " --input " + (dir / "input.safetensors").string() +
         " --output " + (dir / output).string() + " --cpu-experts reference " + extra;
}

class EpCli : public ::testing::Test {
 protected:
  TempDir temp_;
  const fs::path dir_ = temp_.path();
};

void expect_same_outputs(const fs::path& a, const fs::path& b) {
  const SafetensorsFile fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  EXPECT_LE(max_rel_error(fa.get("hidden_states"), fb.get("hidden_states")), 1e-5);
  EXPECT_EQ(max_rel_error(fa.get("topk_weights"), fb.get("topk_weights")), 0.0);
  const Tensor ia = fa.get("topk_ids"), ib = fb.get("topk_ids");
  ASSERT_EQ(ia.shape(), ib.shape());
  EXPECT_TRUE(std::equal(ia.data_as<int32_t>(), ia.data_as<int32_t>() + ia.numel(), ib.data_as<int32_t>()));
}

TEST_F(EpCli, TwoRanksEqualOneWithStatsAndPlacement) {
  TestRng rng;
  write_case(dir_, random_moe_case("deepseek_v3", rng, {.tokens = 33, .experts = 8}));
  ASSERT_EQ(run_command(dir_, layer(dir_, "single.safetensors", "--stats " + (dir_ / "single.json").string()))
                .exit_code,
            0);
  const CommandResult ep = run_command(
      dir_, mpirun(2) + layer(dir_, "ep.safetensors", "--ep --stats " + (dir_ / "ep.json").string()));
  ASSERT_EQ(ep.exit_code, 0) << ep.err;
  expect_same_outputs(dir_ / "ep.safetensors", dir_ / "single.safetensors");
  std::ifstream stats_file(dir_ / "ep.json");
  const nlohmann::json stats = nlohmann::json::parse(stats_file);
  ASSERT_EQ(stats["ep"]["per_rank"].size(), 2u);
  EXPECT_EQ(stats["ep"]["combine"], "f32");  // the CPU path's only combine wire
  int64_t tokens = 0, pairs = 0;
  for (const auto& r : stats["ep"]["per_rank"])
    tokens += r["tokens"].get<int64_t>(), pairs += r["pairs_served"].get<int64_t>();
  EXPECT_EQ(tokens, 33);
  EXPECT_EQ(pairs, 33 * stats["top_k"].get<int64_t>());
  EXPECT_GT(stats["ep"]["per_rank"][0]["bytes_sent"].get<int64_t>(), 0);

  // A load-aware placement with replicas, from the single run's statistics, on 3 ranks (8 experts do not
  // divide over 3: without the placement that is an error naming the fix).
  const CommandResult bad = run_command(dir_, mpirun(3) + layer(dir_, "bad.safetensors", "--ep"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("8 experts do not divide over 3 ranks"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("--placement"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad.safetensors"));
  const ep::Placement p =
      ep::load_aware_placement(ep::load_tokens_per_expert(dir_ / "single.json"), 3, 4);
  ep::save_placement(p, dir_ / "placement.json");
  const CommandResult placed =
      run_command(dir_, mpirun(3) + layer(dir_, "placed.safetensors",
                                          "--ep --placement " + (dir_ / "placement.json").string()));
  ASSERT_EQ(placed.exit_code, 0) << placed.err;
  expect_same_outputs(dir_ / "placed.safetensors", dir_ / "single.safetensors");
}

TEST_F(EpCli, BadOptionsExitTwo) {
  TestRng rng;
  write_case(dir_, random_moe_case("mixtral", rng, {.experts = 4}));
  const CommandResult fast =
      run_command(dir_, std::string(MOE_BINARY) + " layer --config " + (dir_ / "config.json").string() +
                            " --weights " + (dir_ / "weights.safetensors").string() + " --input " +
                            (dir_ / "input.safetensors").string() + " --output " +
                            (dir_ / "y.safetensors").string() + " --ep --cpu-experts fast");
  EXPECT_EQ(fast.exit_code, 2);
  EXPECT_NE(fast.err.find("--ep runs"), std::string::npos) << fast.err;
  const CommandResult no_ep = run_command(dir_, layer(dir_, "y.safetensors", "--placement p.json"));
  EXPECT_EQ(no_ep.exit_code, 2);
  EXPECT_NE(no_ep.err.find("need --ep"), std::string::npos) << no_ep.err;
  const CommandResult combine_no_ep = run_command(dir_, layer(dir_, "y.safetensors", "--ep-combine f32"));
  EXPECT_EQ(combine_no_ep.exit_code, 2);
  EXPECT_NE(combine_no_ep.err.find("need --ep"), std::string::npos) << combine_no_ep.err;
  const CommandResult bf16_combine = run_command(dir_, layer(dir_, "y.safetensors", "--ep --ep-combine bf16"));
  EXPECT_EQ(bf16_combine.exit_code, 2);
  EXPECT_NE(bf16_combine.err.find("f32 only"), std::string::npos) << bf16_combine.err;
  std::ofstream(dir_ / "wrong.json") << R"({"n_experts": 4, "n_ranks": 2, "ranks": [[0, 1], [1, 2]]})";
  const CommandResult wrong = run_command(
      dir_, mpirun(2) + layer(dir_, "y.safetensors", "--ep --placement " + (dir_ / "wrong.json").string()));
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("expert 3 is on no rank"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace moe::test
