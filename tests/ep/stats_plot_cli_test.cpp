// `moe stats plot`: a real `moe generate --stats` file drawn as SVG (one cell per layer and expert, dead and
// hot experts marked as the statistics say), per-rank and per-epoch bars of an EP file, and bad input
// refused with exit 2 and nothing written.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "run_command.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int count_of(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

CommandResult moe(const TempDir& dir, const std::string& args) {
  return run_command(dir.path(), "(" MOE_BINARY " " + args + " >/dev/null)");
}

TEST(StatsPlotCli, HeatmapOfAGenerateStatsFile) {
  TempDir dir;
  const std::string model = (fs::path(MOE_TEST_DATA) / "models" / "olmoe").string();
  ASSERT_EQ(moe(dir, "generate --model " + shell_quote(model) +
                         " --prompt-ids 1,2,3,4,5,6 --max-new-tokens 6 --stats " + (dir / "s.json").string())
                .exit_code,
            0);
  const CommandResult r =
      moe(dir, "stats plot " + (dir / "s.json").string() + " --out " + (dir / "s.svg").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string svg = read_file(dir / "s.svg");
  ASSERT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);

  const json stats = json::parse(read_file(dir / "s.json"));
  int cells = 0, dead = 0, hot = 0;
  for (const auto& [key, layer] : stats["layers"].items()) {
    const auto pairs = layer["tokens_per_expert"].get<std::vector<int64_t>>();
    double total = 0;
    for (int64_t p : pairs) total += static_cast<double>(p);
    for (size_t e = 0; e < pairs.size(); ++e) {
      ++cells;
      EXPECT_NE(svg.find(fmt::format("<title>layer {} expert {}: {} pairs", key, e, pairs[e])),
                std::string::npos);
      hot += pairs[e] >= 2.0 * total / static_cast<double>(pairs.size());
    }
    dead += static_cast<int>(layer["dead_experts"].size());
  }
  EXPECT_EQ(count_of(svg, "<title>layer \\d+ expert \\d+:"), cells);
  EXPECT_EQ(count_of(svg, "class=\"dead\""), dead);
  EXPECT_EQ(count_of(svg, "class=\"hot\""), hot);
  EXPECT_EQ(count_of(svg, ", dead</title>"), dead);
}

TEST(StatsPlotCli, RankLoadAndEpochs) {
  TempDir dir;
  const json stats = {
      {"n_experts", 4},
      {"top_k", 1},
      {"layers",
       {{"1", {{"tokens_per_expert", {9, 0, 1, 2}}}}, {"3", {{"tokens_per_expert", {3, 3, 3, 3}}}}}},
      {"ep",
       {{"ranks", 2},
        {"layers",
         {{"1", {{{"rank", 0}, {"pairs_served", 9}}, {{"rank", 1}, {"pairs_served", 3}}}},
          {"3", {{{"rank", 0}, {"pairs_served", 6}}, {{"rank", 1}, {"pairs_served", 6}}}}}}}},
      {"epochs", {{{"epoch", 1}, {"layers", {{"1", {{"before", {9, 3}}, {"after", {6, 6}}}}}}}}}};
  std::ofstream(dir / "ep.json") << stats.dump();
  const CommandResult r =
      moe(dir, "stats plot " + (dir / "ep.json").string() + " --out " + (dir / "ep.svg").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string svg = read_file(dir / "ep.svg");
  EXPECT_NE(svg.find("<title>layer 1 rank 0: 9 pairs</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>layer 3 rank 1: 6 pairs</title>"), std::string::npos);
  EXPECT_NE(svg.find("epoch 1: per-rank load before"), std::string::npos);
  EXPECT_NE(svg.find("<title>layer 1 rank 1 before: 3 pairs</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>layer 1 rank 1 after: 6 pairs</title>"), std::string::npos);
  EXPECT_NE(svg.find("before 1.50  after 1.00"), std::string::npos);  // max/mean per layer
  EXPECT_EQ(count_of(svg, "class=\"dead\""), 1);                      // layer 1 expert 1
  EXPECT_EQ(count_of(svg, "class=\"hot\""), 1);                       // layer 1 expert 0: 9 of mean 3
}

TEST(StatsPlotCli, BadInputExitsTwoAndWritesNothing) {
  TempDir dir;
  std::ofstream(dir / "bad.json") << R"({"layers": {"0": {"n_tokens": 3}}})";
  std::ofstream(dir / "keep.svg") << "earlier";
  CommandResult r =
      moe(dir, "stats plot " + (dir / "bad.json").string() + " --out " + (dir / "keep.svg").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("error: stats file layer 0 has no tokens_per_expert"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(dir / "keep.svg"), "earlier");

  r = moe(dir, "stats plot " + (dir / "bad.json").string() + " --out " + (dir / "x.png").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("writes SVG only"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "x.png"));

  r = moe(dir, "stats plot " + (dir / "missing.json").string() + " --out " + (dir / "y.svg").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("error: stats file"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "y.svg"));
}

}  // namespace
}  // namespace moe::test
