// `mpirun -np R moe generate --ep --stats`: every rank's work and bytes per MoE layer. The test rebuilds the
// exact figures from the routing trace and the dispatch contract (each forward's tokens split over the ranks
// by token_range, contiguous placement, one copy of a token per destination rank, rows in the wire format
// plus k (slot, weight) pairs of 8 bytes, partial sums back as fp32 rows) and checks the totals add up:
// the ranks' pairs make the layer's tokens times k, and what the ranks sent is what they received.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModels = fs::path(MOE_TEST_DATA) / "models";

struct RankFigures {
  int64_t tokens = 0, copies_sent = 0, copies_received = 0, pairs_served = 0, bytes_sent = 0, bytes_received = 0;
  bool operator==(const RankFigures&) const = default;
};

void PrintTo(const RankFigures& f, std::ostream* os) {
  *os << fmt::format("{{tokens {}, copies {}/{}, pairs {}, bytes {}/{}}}", f.tokens, f.copies_sent, f.copies_received,
                     f.pairs_served, f.bytes_sent, f.bytes_received);
}

RankFigures figures(const json& j) {
  return {j.at("tokens"), j.at("copies_sent"), j.at("copies_received"), j.at("pairs_served"), j.at("bytes_sent"),
          j.at("bytes_received")};
}

// The rank that routes token t of a forward of T tokens: an even split, the first ranks one longer.
int owner(int64_t t, int64_t T, int R) {
  for (int r = 0; r < R; ++r) {
    const int64_t end = (r + 1) * (T / R) + std::min<int64_t>(r + 1, T % R);
    if (t < end) return r;
  }
  return R - 1;
}

// Bytes of one dispatched row in the wire format: fp32, bf16, or fp8 with one fp32 scale per 128 values.
int64_t row_bytes(const std::string& transfer, int64_t H) {
  if (transfer == "f32") return 4 * H;
  if (transfer == "bf16") return 2 * H;
  return H + 4 * ((H + 127) / 128);
}

// layer -> [R] what each rank should report, from the trace of one prompt of `prompt_len` tokens (the
// prefill is one forward; every generated token is fed alone).
std::map<int, std::vector<RankFigures>> expected(const fs::path& trace, int64_t prompt_len, int R, int E, int64_t H,
                                                 const std::string& transfer) {
  const int per_rank = E / R;
  const int64_t row = row_bytes(transfer, H), combine_row = 4 * H;
  std::map<int, std::vector<RankFigures>> out;
  std::istringstream in(read_file(trace));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    const int64_t pos = j.at("pos");
    const std::vector<int> experts = j.at("experts");
    const int64_t meta = 8 * static_cast<int64_t>(experts.size());
    const int src = pos < prompt_len ? owner(pos, prompt_len, R) : 0;
    std::vector<RankFigures>& f = out.try_emplace(j.at("layer").get<int>(), R).first->second;
    ++f[src].tokens;
    std::map<int, int64_t> pairs_on;  // destination rank -> pairs
    for (int e : experts) ++pairs_on[e / per_rank];
    for (const auto& [dst, pairs] : pairs_on) {
      ++f[src].copies_sent;
      ++f[dst].copies_received;
      f[dst].pairs_served += pairs;
      if (dst == src) continue;
      f[src].bytes_sent += row + meta;
      f[dst].bytes_received += row + meta;
      f[dst].bytes_sent += combine_row;
      f[src].bytes_received += combine_row;
    }
  }
  return out;
}

TEST(GenerateEpStats, PerRankWorkAndBytesAddUp) {
  TempDir dir;
  const fs::path model = kModels / "qwen3_moe";
  const int64_t H = json::parse(read_file(model / "config.json")).at("hidden_size");
  const std::vector<int> prompt = json::parse(read_file(model / "reference.json")).at("cases")[0].at("ids");
  for (const auto& [R, transfer] : std::vector<std::pair<int, std::string>>{{2, "f32"}, {4, "fp8"}}) {
    SCOPED_TRACE(fmt::format("{} ranks, {} transfer", R, transfer));
    fs::remove(dir / "stats.json");
    fs::remove(dir / "trace.jsonl");
    // run_command drops stdout: the printed summary goes to a file.
    const auto run = run_command(
        dir.path(), fmt::format("({} --oversubscribe --allow-run-as-root -x MOE_NUM_THREADS=1 -np {} {} generate --model "
                                "{} --prompt-ids {} --max-new-tokens 6 --ep --ep-transfer {} --stats {} "
                                "--trace-routing {} > {})",
                                MOE_MPIEXEC, R, MOE_BINARY, model.string(), fmt::join(prompt, ","), transfer,
                                (dir / "stats.json").string(), (dir / "trace.jsonl").string(),
                                (dir / "stdout.txt").string()));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const std::string out = read_file(dir / "stdout.txt");
    const json stats = json::parse(read_file(dir / "stats.json"));
    const int E = stats.at("n_experts"), k = stats.at("top_k");
    const json& ep = stats.at("ep");
    EXPECT_EQ(ep.at("ranks"), R);
    EXPECT_EQ(ep.at("transfer"), transfer);
    EXPECT_EQ(ep.at("combine"), "f32");  // the CPU path's only combine wire
    ASSERT_EQ(ep.at("experts").size(), static_cast<size_t>(R));
    EXPECT_EQ(ep.at("experts")[1].at(0), E / R);
    EXPECT_NE(out.find(fmt::format("rank {} (experts {}-{}): ", R - 1, E - E / R, E - 1)), std::string::npos) << out;

    const auto want = expected(dir / "trace.jsonl", static_cast<int64_t>(prompt.size()), R, E, H, transfer);
    ASSERT_EQ(ep.at("layers").size(), want.size());
    std::vector<RankFigures> totals(R);
    for (const auto& [layer, ranks] : want) {
      SCOPED_TRACE(fmt::format("layer {}", layer));
      const json& got = ep.at("layers").at(std::to_string(layer));
      ASSERT_EQ(got.size(), static_cast<size_t>(R));
      int64_t pairs = 0, tokens = 0, sent = 0, received = 0;
      for (int r = 0; r < R; ++r) {
        const RankFigures f = figures(got[r]);
        EXPECT_EQ(f, ranks[r]) << "rank " << r;
        pairs += f.pairs_served;
        tokens += f.tokens;
        sent += f.bytes_sent;
        received += f.bytes_received;
        totals[r].pairs_served += f.pairs_served;
        totals[r].bytes_sent += f.bytes_sent;
      }
      // Every token of the layer was routed by one rank, and each of its k pairs ran on one rank.
      const int64_t layer_tokens = stats.at("layers").at(std::to_string(layer)).at("n_tokens");
      EXPECT_EQ(tokens, layer_tokens);
      EXPECT_EQ(pairs, layer_tokens * k);
      EXPECT_EQ(sent, received);
      EXPECT_GT(sent, 0);
    }
    for (int r = 0; r < R; ++r) {
      EXPECT_EQ(ep.at("per_rank")[r].at("pairs_served"), totals[r].pairs_served) << "rank " << r;
      EXPECT_EQ(ep.at("per_rank")[r].at("bytes_sent"), totals[r].bytes_sent) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace moe::test
