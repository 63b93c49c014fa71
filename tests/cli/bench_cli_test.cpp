// `moe bench --backend cpu` on a tiny shape: the JSON rows carry every field of a row with positive values,
// one row per requested token count, the CPU extras, a floor consistent with its ceilings and paired floors
// consistent with each run's; CPU-only options are refused clearly with --backend cuda.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"

#ifndef MOE_BINARY
#error "MOE_BINARY must name the moe executable (set by tests/cli/CMakeLists.txt)"
#endif

namespace moe::test {
namespace {

struct RunResult {
  int exit_code = -1;
  std::string err;
};

RunResult run_bench(const TempDir& dir, const std::string& args) {
  const std::string err_file = (dir / "stderr.txt").string();
  const int status = std::system((std::string(MOE_BINARY) + " bench " + args + " >/dev/null 2>" + err_file).c_str());
  std::ifstream in(err_file);
  std::stringstream text;
  text << in.rdbuf();
  return {status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_cpu_rows(const nlohmann::json& rows, const std::string& weights) {
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 2u) << rows.dump(2);
  const int64_t expected_tokens[] = {1, 4};
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& r = rows[i];
    SCOPED_TRACE(r.dump(2));
    EXPECT_EQ(r.at("shape"), "custom:256,128,8,2");
    EXPECT_EQ(r.at("H"), 256);
    EXPECT_EQ(r.at("I"), 128);
    EXPECT_EQ(r.at("E"), 8);
    EXPECT_EQ(r.at("k"), 2);
    EXPECT_EQ(r.at("tokens"), expected_tokens[i]);
    EXPECT_EQ(r.at("backend"), "cpu");
    EXPECT_EQ(r.at("weights"), weights);
    for (const char* key : {"us_median", "tflops", "weight_tbps", "floor_us", "ratio_to_floor", "us_min", "us_max",
                            "router_prepare_us_median", "read_gbps", "peak_gflops", "experts_touched"}) {
      ASSERT_TRUE(r.contains(key)) << key;
      EXPECT_GT(r.at(key).get<double>(), 0.0) << key;
    }
    for (const char* when : {"ceilings_before", "ceilings_after"}) {
      EXPECT_GT(r.at(when).at("read_gbps").get<double>(), 0.0) << when;
      EXPECT_GT(r.at(when).at("peak_gflops").get<double>(), 0.0) << when;
    }
    EXPECT_GE(r.at("reps").get<int>(), 3);
    EXPECT_LE(r.at("us_min").get<double>(), r.at("us_median").get<double>());
    EXPECT_GE(r.at("us_max").get<double>(), r.at("us_median").get<double>());
    EXPECT_LE(r.at("experts_touched").get<double>(), 2.0 * expected_tokens[i]);
    EXPECT_NEAR(r.at("ratio_to_floor").get<double>(), r.at("us_median").get<double>() / r.at("floor_us").get<double>(),
                1e-9 * r.at("ratio_to_floor").get<double>());
    // The stricter floor: the higher ceiling of before and after.
    EXPECT_DOUBLE_EQ(r.at("read_gbps").get<double>(),
                     std::max(r.at("ceilings_before").at("read_gbps").get<double>(),
                              r.at("ceilings_after").at("read_gbps").get<double>()));
    // floor = max(flops / peak, touched bytes / bandwidth), bytes at the weights' width.
    const double flops = 2.0 * expected_tokens[i] * 2 * 3 * 256 * 128;
    const double bytes = r.at("experts_touched").get<double>() * 3 * 256 * 128 * (weights == "int8" ? 1 : 2);
    const double floor_us = std::max(flops / (r.at("peak_gflops").get<double>() * 1e9),
                                     bytes / (r.at("read_gbps").get<double>() * 1e9)) * 1e6;
    EXPECT_NEAR(r.at("floor_us").get<double>(), floor_us, 1e-6 * floor_us);
    // Paired: every run against its own ceilings; the row's figure is the median of the runs' ratios.
    const nlohmann::json& runs = r.at("runs");
    const size_t reps = r.at("reps").get<size_t>();
    std::vector<double> ratios;
    for (const char* key : {"us", "experts_touched", "read_gbps", "peak_gflops", "ratio_to_floor"})
      ASSERT_EQ(runs.at(key).size(), reps) << key;
    for (size_t run = 0; run < reps; ++run) {
      const double run_bytes =
          runs.at("experts_touched")[run].get<double>() * 3 * 256 * 128 * (weights == "int8" ? 1 : 2);
      const double run_floor = std::max(flops / (runs.at("peak_gflops")[run].get<double>() * 1e9),
                                        run_bytes / (runs.at("read_gbps")[run].get<double>() * 1e9)) * 1e6;
      const double ratio = runs.at("us")[run].get<double>() / run_floor;
      EXPECT_NEAR(runs.at("ratio_to_floor")[run].get<double>(), ratio, 1e-6 * ratio) << run;
      ratios.push_back(ratio);
    }
    std::sort(ratios.begin(), ratios.end());
    const double median = reps % 2 ? ratios[reps / 2] : 0.5 * (ratios[reps / 2 - 1] + ratios[reps / 2]);
    EXPECT_NEAR(r.at("ratio_to_floor_paired").get<double>(), median, 1e-6 * median);
  }
}

TEST(BenchCli, CpuRowsHaveEveryField) {
  TempDir dir;
  const auto json = dir / "rows.json";
  const RunResult r = run_bench(
      dir, "--backend cpu --shape custom:256,128,8,2 --tokens 1,4 --repeats 3 --layers 2 --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_cpu_rows(read_json(json), "bf16");
}

TEST(BenchCli, CpuInt8WeightsAndZipfRouting) {
  TempDir dir;
  const auto json = dir / "rows.json";
  const RunResult r = run_bench(dir, "--backend cpu --shape custom:256,128,8,2 --tokens 1,4 --repeats 3 --layers 2 "
                                     "--cpu-weights int8 --routing zipf --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = read_json(json);
  expect_cpu_rows(rows, "int8");
  for (const nlohmann::json& row : rows) EXPECT_EQ(row.at("routing"), "zipf");
}

TEST(BenchCli, CpuOptionsAreRefusedWithCuda) {
  TempDir dir;
  const RunResult r = run_bench(dir, "--backend cuda --shape custom:256,128,8,2 --tokens 1 --cpu-weights int8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cpu-weights is a CPU option"), std::string::npos) << r.err;
}

TEST(BenchCli, CudaWeightsAreRefusedWithCpu) {
  TempDir dir;
  const RunResult r = run_bench(dir, "--backend cpu --shape custom:256,128,8,2 --tokens 1 --cuda-weights fp8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cuda-weights is a CUDA option"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moe::test
