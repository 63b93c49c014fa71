// End-to-end tests of `moe generate` on the transformers fixtures (tests/data/models/<family>: tiny
// random-weight checkpoints with reference.json holding, per prompt, its ids, transformers' greedy
// continuation of 16 tokens and each MoE layer's top-k experts during the prefill). The real binary must
// continue every prompt exactly as transformers did, alone or batched, write the routing trace and load
// statistics consistently, sample reproducibly, and turn each bad input into one "error:" line, exit 2.
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "run_command.h"
#include "temp_dir.h"

#ifndef MOE_BINARY
#error "MOE_BINARY must name the moe executable (set by tests/cli/CMakeLists.txt)"
#endif

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModels = fs::path(MOE_TEST_DATA) / "models";

json read_json(const fs::path& path) { return json::parse(read_file(path)); }

std::string id_list(const std::vector<int32_t>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

struct Output {
  CommandResult result;
  std::string out;
  std::string command;
};

// Runs `moe generate ARGS`, keeping stdout and stderr.
Output generate(const TempDir& dir, const std::string& args) {
  const fs::path out_file = dir / "stdout.txt";
  Output o;
  o.command = "moe generate " + args;
  o.result = run_command(dir.path(), "(" MOE_BINARY " generate " + args + " >" + out_file.string() + ")");
  o.out = read_file(out_file);
  return o;
}

#define EXPECT_SUCCESS(o) \
  EXPECT_EQ((o).result.exit_code, 0) << (o).command << "\nstderr: " << (o).result.err << "\nstdout: " << (o).out

// The fixtures whose reference is transformers' fp32 run of the stored weights. Not deepseek_v3_fp8, whose
// reference is transformers' W8A8 run on a GPU (its tokens may part from a run of the dequantised weights;
// tests/model/causal_lm_fp8_test.cpp checks it).
std::vector<std::string> families() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kModels))
    if (!read_json(entry.path() / "reference.json").contains("fp8")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> generated_ids;
  std::string generated_text;
  json routing;  // {"N": {"experts": [[...] per prompt token], "weights": ...}}
};

std::vector<Case> cases_of(const std::string& family) {
  std::vector<Case> cases;
  const json reference = read_json(kModels / family / "reference.json");
  for (const json& c : reference.at("cases"))
    cases.push_back({c.at("text"), c.at("ids"), c.at("generated_ids"), c.at("generated_text"), c.at("routing")});
  return cases;
}

// The reference experts compute as transformers does (fp32): the default for BF16 checkpoints, the fast bf16
// experts, may flip a near-tie and continue differently.
std::string model_arg(const std::string& family) {
  return "--model " + (kModels / family).string() + " --cpu-experts reference";
}

TEST(GenerateCli, GreedyContinuationEqualsTransformers) {
  TempDir dir;
  for (const std::string& family : families()) {
    for (const Case& c : cases_of(family)) {
      SCOPED_TRACE(family + ": \"" + c.text + "\"");
      const auto o = generate(dir, model_arg(family) + " --prompt-ids " + id_list(c.ids) +
                                       " --max-new-tokens 16 --json " + (dir / "out.json").string());
      EXPECT_SUCCESS(o);
      const json j = read_json(dir / "out.json");
      std::vector<std::string> keys;
      for (const auto& [key, value] : j.items()) keys.push_back(key);
      std::sort(keys.begin(), keys.end());
      EXPECT_EQ(keys, (std::vector<std::string>{"decode_tokens_per_s", "generated_ids", "prefill_tokens_per_s",
                                                "prompt_ids", "text"}));
      EXPECT_EQ(j.at("prompt_ids").get<std::vector<int32_t>>(), c.ids);
      EXPECT_EQ(j.at("generated_ids").get<std::vector<int32_t>>(), c.generated_ids);
      EXPECT_EQ(j.at("text").get<std::string>(), c.generated_text);
      EXPECT_GT(j.at("prefill_tokens_per_s").get<double>(), 0.0);
      EXPECT_GT(j.at("decode_tokens_per_s").get<double>(), 0.0);
    }
  }
}

TEST(GenerateCli, TextPromptGivesTheSameIds) {
  TempDir dir;
  for (const std::string& family : families()) {
    const Case c = cases_of(family).front();
    SCOPED_TRACE(family);
    const auto o = generate(dir, model_arg(family) + " --prompt " + shell_quote(c.text) +
                                     " --max-new-tokens 16 --print-ids --json " + (dir / "out.json").string());
    EXPECT_SUCCESS(o);
    const json j = read_json(dir / "out.json");
    EXPECT_EQ(j.at("prompt_ids").get<std::vector<int32_t>>(), c.ids);
    EXPECT_EQ(j.at("generated_ids").get<std::vector<int32_t>>(), c.generated_ids);
    // What it prints: the continuation, its ids, both speeds and a load line per MoE layer.
    EXPECT_NE(o.out.find("generated: " + c.generated_text + "\n"), std::string::npos) << o.out;
    const std::string ids = fmt::format("generated ids: {}\n", fmt::join(c.generated_ids, " "));
    EXPECT_NE(o.out.find(ids), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("prefill: " + std::to_string(c.ids.size()) + " tokens in "), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("decode:  15 tokens in "), std::string::npos) << o.out;
    for (const auto& [layer, routing] : c.routing.items())
      EXPECT_NE(o.out.find("  layer " + layer + ": imbalance "), std::string::npos) << o.out;
  }
}

// Several prompts of different lengths in one batch, also prefilled in pieces smaller than one prompt:
// each sequence continues exactly as it does alone.
TEST(GenerateCli, BatchOfPromptsEqualsEachAlone) {
  TempDir dir;
  for (const std::string& family : families()) {
    const std::vector<Case> cases = cases_of(family);
    std::string prompts;
    for (const Case& c : cases) prompts += " --prompt-ids " + id_list(c.ids);
    for (const std::string chunk : {"4096", "7"}) {
      SCOPED_TRACE(family + ", --max-batched-tokens " + chunk);
      const auto o = generate(dir, model_arg(family) + prompts + " --max-new-tokens 16 --max-batched-tokens " + chunk +
                                       " --json " + (dir / "out.json").string());
      EXPECT_SUCCESS(o);
      const json j = read_json(dir / "out.json");
      ASSERT_EQ(j.at("generated_ids").size(), cases.size());
      ASSERT_EQ(j.at("text").size(), cases.size());
      for (size_t s = 0; s < cases.size(); ++s) {
        EXPECT_EQ(j.at("prompt_ids")[s].get<std::vector<int32_t>>(), cases[s].ids);
        EXPECT_EQ(j.at("generated_ids")[s].get<std::vector<int32_t>>(), cases[s].generated_ids) << "sequence " << s;
        EXPECT_EQ(j.at("text")[s].get<std::string>(), cases[s].generated_text);
      }
    }
  }
}

// The trace has one line per (token run through the model, MoE layer) with exactly the documented fields;
// its prefill expert sets equal transformers' (sets: DeepSeek's routers return top-k unordered), and the
// stats file counts the same pairs.
TEST(GenerateCli, TraceAndStatsDescribeEveryRoutedToken) {
  TempDir dir;
  for (const std::string& family : families()) {
    SCOPED_TRACE(family);
    const std::vector<Case> cases = cases_of(family);
    const json config = read_json(kModels / family / "config.json");
    const int top_k = config.at("num_experts_per_tok");
    const auto o = generate(dir, model_arg(family) + " --prompt-ids " + id_list(cases[0].ids) + " --prompt-ids " +
                                     id_list(cases[1].ids) + " --max-new-tokens 16 --trace-routing " +
                                     (dir / "trace.jsonl").string() + " --stats " + (dir / "stats.json").string());
    EXPECT_SUCCESS(o);

    // seq, pos, layer -> experts; and the token sequences the lines must follow.
    std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<int32_t>> experts;
    std::map<int64_t, std::vector<int64_t>> pairs_per_expert;  // layer -> [expert] counts
    std::ifstream trace(dir / "trace.jsonl");
    std::string line;
    size_t lines = 0;
    while (std::getline(trace, line)) {
      ++lines;
      // Parsed in file order, so that the test sees the keys' order.
      const nlohmann::ordered_json e = nlohmann::ordered_json::parse(line);
      std::vector<std::string> keys;
      for (const auto& [key, value] : e.items()) keys.push_back(key);
      EXPECT_EQ(keys, (std::vector<std::string>{"seq", "pos", "token", "layer", "experts", "weights"})) << line;
      const int64_t seq = e.at("seq"), pos = e.at("pos"), layer = e.at("layer");
      ASSERT_TRUE(seq == 0 || seq == 1) << line;
      std::vector<int32_t> sequence = cases[seq].ids;
      sequence.insert(sequence.end(), cases[seq].generated_ids.begin(), cases[seq].generated_ids.end() - 1);
      ASSERT_LT(pos, static_cast<int64_t>(sequence.size())) << line;
      EXPECT_EQ(e.at("token").get<int32_t>(), sequence[pos]) << line;
      const auto ids = e.at("experts").get<std::vector<int32_t>>();
      EXPECT_EQ(static_cast<int>(ids.size()), top_k) << line;
      EXPECT_EQ(e.at("weights").size(), ids.size()) << line;
      EXPECT_TRUE(experts.emplace(std::tuple(seq, pos, layer), ids).second) << "twice: " << line;
      auto& counts = pairs_per_expert[layer];
      for (int32_t x : ids) {
        if (static_cast<size_t>(x) >= counts.size()) counts.resize(x + 1, 0);
        ++counts[x];
      }
    }
    // Every token but each sequence's last generated one went through every MoE layer.
    const size_t routed = cases[0].ids.size() + cases[1].ids.size() + 2 * 15;
    const size_t moe_layers = cases[0].routing.size();
    EXPECT_EQ(lines, routed * moe_layers);
    for (int64_t seq : {0, 1}) {
      for (const auto& [layer, routing] : cases[seq].routing.items()) {
        const auto reference = routing.at("experts").get<std::vector<std::vector<int32_t>>>();
        ASSERT_EQ(reference.size(), cases[seq].ids.size());
        for (size_t pos = 0; pos < reference.size(); ++pos) {
          const auto it = experts.find({seq, static_cast<int64_t>(pos), std::stoll(layer)});
          ASSERT_NE(it, experts.end()) << "no line for seq " << seq << " pos " << pos << " layer " << layer;
          EXPECT_EQ(std::set<int32_t>(it->second.begin(), it->second.end()),
                    std::set<int32_t>(reference[pos].begin(), reference[pos].end()))
              << "seq " << seq << " pos " << pos << " layer " << layer;
        }
      }
    }

    const json stats = read_json(dir / "stats.json");
    EXPECT_EQ(stats.at("top_k").get<int>(), top_k);
    EXPECT_EQ(stats.at("prompt_tokens").get<size_t>(), cases[0].ids.size() + cases[1].ids.size());
    EXPECT_EQ(stats.at("generated_tokens").get<size_t>(), 30u);
    ASSERT_EQ(stats.at("layers").size(), moe_layers);
    std::vector<int64_t> totals;
    for (const auto& [layer, s] : stats.at("layers").items()) {
      SCOPED_TRACE("layer " + layer);
      const auto counts = s.at("tokens_per_expert").get<std::vector<int64_t>>();
      EXPECT_EQ(s.at("n_tokens").get<size_t>(), routed);
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), static_cast<int64_t>(routed) * top_k);
      auto expected = pairs_per_expert.at(std::stoll(layer));
      expected.resize(counts.size(), 0);
      EXPECT_EQ(counts, expected);
      const auto prompt = stats.at("prompt").at(layer).at("tokens_per_expert").get<std::vector<int64_t>>();
      const auto generated = stats.at("generated").at(layer).at("tokens_per_expert").get<std::vector<int64_t>>();
      for (size_t x = 0; x < counts.size(); ++x) EXPECT_EQ(prompt[x] + generated[x], counts[x]) << "expert " << x;
      EXPECT_EQ(std::accumulate(generated.begin(), generated.end(), int64_t{0}), 30 * top_k);
      totals.resize(counts.size(), 0);
      for (size_t x = 0; x < counts.size(); ++x) totals[x] += counts[x];
      EXPECT_EQ(s.at("dead_experts").size(),
                static_cast<size_t>(std::count(counts.begin(), counts.end(), int64_t{0})));
    }
    EXPECT_EQ(stats.at("totals").at("tokens_per_expert").get<std::vector<int64_t>>(), totals);
    EXPECT_EQ(stats.at("totals").at("n_tokens").get<size_t>(), routed * moe_layers);
  }
}

TEST(GenerateCli, SamplingIsReproducibleBySeed) {
  TempDir dir;
  const std::string family = "qwen3_moe";
  const Case c = cases_of(family).front();
  const auto run = [&](const std::string& sampling) {
    const auto o = generate(dir, model_arg(family) + " --prompt-ids " + id_list(c.ids) + " --max-new-tokens 16 " +
                                     sampling + " --json " + (dir / "out.json").string());
    EXPECT_SUCCESS(o);
    return read_json(dir / "out.json").at("generated_ids").get<std::vector<int32_t>>();
  };
  const auto first = run("--temperature 1.0 --seed 1");
  EXPECT_EQ(first.size(), 16u);
  EXPECT_EQ(first, run("--temperature 1.0 --seed 1"));
  EXPECT_NE(first, run("--temperature 1.0 --seed 2"));
  EXPECT_NE(first, c.generated_ids);
  // One candidate left is greedy, whatever the seed and temperature.
  EXPECT_EQ(run("--temperature 5.0 --top-k 1 --seed 3"), c.generated_ids);
  EXPECT_EQ(run("--temperature 5.0 --top-p 1e-9 --seed 4"), c.generated_ids);
  const auto nucleus = run("--temperature 0.8 --top-p 0.9 --top-k 50 --seed 5");
  EXPECT_EQ(nucleus, run("--temperature 0.8 --top-p 0.9 --top-k 50 --seed 5"));
}

TEST(GenerateCli, PromptIdsNeedNoTokenizer) {
  TempDir dir;
  const fs::path model = dir / "model";
  fs::create_directory(model);
  for (const std::string file : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(kModels / "qwen3_moe" / file, model / file);
  const Case c = cases_of("qwen3_moe").front();
  const auto o = generate(dir, "--model " + model.string() + " --prompt-ids " + id_list(c.ids) +
                                   " --max-new-tokens 16 --json " + (dir / "out.json").string());
  EXPECT_SUCCESS(o);
  const json j = read_json(dir / "out.json");
  EXPECT_EQ(j.at("generated_ids").get<std::vector<int32_t>>(), c.generated_ids);
  EXPECT_TRUE(j.at("text").is_null());
  const auto text = generate(dir, "--model " + model.string() + " --prompt hello");
  EXPECT_EQ(text.result.exit_code, 2);
  EXPECT_NE(text.result.err.find("--prompt needs a tokenizer"), std::string::npos) << text.result.err;
}

TEST(GenerateCli, MaxNewTokensZeroRunsThePrefillOnly) {
  TempDir dir;
  const Case c = cases_of("olmoe").front();
  const auto o = generate(dir, model_arg("olmoe") + " --prompt-ids " + id_list(c.ids) + " --max-new-tokens 0 --json " +
                                   (dir / "out.json").string() + " --trace-routing " + (dir / "t.jsonl").string());
  EXPECT_SUCCESS(o);
  EXPECT_TRUE(read_json(dir / "out.json").at("generated_ids").empty());
  std::ifstream trace(dir / "t.jsonl");
  const auto lines = std::count(std::istreambuf_iterator<char>(trace), {}, '\n');
  EXPECT_EQ(static_cast<size_t>(lines), c.ids.size() * c.routing.size());
}

TEST(GenerateCli, CpuExpertsFollowTheCheckpointDtype) {
  TempDir dir;
  // qwen2_moe's fixture is BF16, qwen3_moe's F32, olmoe's F16.
  for (const auto& [family, experts] : std::vector<std::pair<std::string, std::string>>{
           {"qwen2_moe", "fast"}, {"qwen3_moe", "reference"}, {"olmoe", "reference"}}) {
    const auto o = generate(dir, "--model " + (kModels / family).string() + " --prompt-ids 5,6 --max-new-tokens 2");
    EXPECT_SUCCESS(o);
    EXPECT_NE(o.out.find("cpu backend, " + experts + " CPU experts"), std::string::npos) << family << ": " << o.out;
  }
}

// The loading bar shows on a terminal (util-linux `script` gives the command one) and ends cleared; in a
// pipe stderr stays free of it.
TEST(GenerateCli, LoadingBarOnATerminalOnly) {
  TempDir dir;
  const std::string args = "--model " + (kModels / "qwen3_moe").string() + " --prompt-ids 5,6 --max-new-tokens 1";
  const fs::path typescript = dir / "terminal.txt";
  const CommandResult tty = run_command(
      dir.path(), "(script -qec " + shell_quote(std::string(MOE_BINARY) + " generate " + args) + " /dev/null >" +
                      typescript.string() + ")");
  ASSERT_EQ(tty.exit_code, 0) << tty.err;
  const std::string shown = read_file(typescript);
  EXPECT_NE(shown.find("[###############...............] 1/2 layers"), std::string::npos) << shown;
  EXPECT_NE(shown.find("[##############################] 2/2 layers\r\033[K"), std::string::npos) << shown;
  const auto piped = generate(dir, args);
  EXPECT_SUCCESS(piped);
  EXPECT_EQ(piped.result.err.find("layers"), std::string::npos) << piped.result.err;
}

TEST(GenerateCli, HelpSaysPromptRepeats) {
  TempDir dir;
  const auto o = generate(dir, "--help");
  EXPECT_SUCCESS(o);
  EXPECT_NE(o.out.find("repeat --prompt"), std::string::npos) << o.out;
}

TEST(GenerateCli, BadInputIsOneErrorLineAndExitTwo) {
  TempDir dir;
  const std::string model = model_arg("qwen3_moe");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model " + (dir / "missing").string() + " --prompt-ids 1", "is not a directory"},
      {"--prompt-ids 1", "--model is required"},
      {model, "either as text (--prompt TEXT) or as token ids"},
      {model + " --prompt hi --prompt-ids 1", "either as text (--prompt TEXT) or as token ids"},
      {model + " --prompt-ids 1,2048", "token id 2048 is outside the vocabulary [0, 2048)"},
      {model + " --prompt-ids 5,-3", "token id -3 is outside the vocabulary"},
      {model + " --prompt-ids 1,x", "--prompt-ids expects comma-separated token ids"},
      {model + " --prompt-ids ,", "has no tokens"},
      {model + " --prompt-ids 1 --temperature -1", "temperature must be >= 0"},
      {model + " --prompt-ids 1 --temperature 1 --top-p 0", "top_p must be in (0, 1]"},
      {model + " --prompt-ids 1 --temperature 1 --top-p 1.5", "top_p must be in (0, 1]"},
      {model + " --prompt-ids 1 --temperature 1 --top-k -1", "top_k must be >= 0"},
      {model + " --prompt-ids 1 --top-p 0.9", "add --temperature"},
      {model + " --prompt-ids 1 --seed 3", "add --temperature"},
      {model + " --prompt-ids 1 --max-new-tokens -1", "--max-new-tokens: must be an integer in [0, 2^63), got -1"},
      {model + " --prompt-ids 1 --max-batched-tokens 0", "--max-batched-tokens: must be an integer in [1, 2^63), got 0"},
      {model + " --prompt-ids 1 --backend tpu", "--backend"},
      {model + " --prompt-ids 1 --placement p.json", "--placement, --ep-transfer, --ep-combine and --eplb-interval-steps need --ep"},
      {model + " --prompt-ids 1 --ep-combine f32", "--placement, --ep-transfer, --ep-combine and --eplb-interval-steps need --ep"},
      {model + " --prompt-ids 1 --ep --ep-combine bf16", "sends its partial sums back as f32 only"},
      {model + " --prompt-ids 1 --ep --ep-combine fp8", "--ep-combine"},
      {model + " --prompt-ids 1 --json " + (dir / "no" / "such" / "dir.json").string(), "does not exist (create it first)"},
      {model + " --prompt-ids 1 --trace-routing " + (dir / "no" / "t.jsonl").string(), "--trace-routing '"},
  };
  for (const auto& [args, message] : cases) {
    const auto o = generate(dir, args);
    SCOPED_TRACE(o.command);
    EXPECT_EQ(o.result.exit_code, 2) << o.result.err;
    EXPECT_TRUE(o.result.err.starts_with("error: ")) << o.result.err;
    EXPECT_NE(o.result.err.find(message), std::string::npos) << o.result.err;
    std::string trimmed = o.result.err;
    while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
    EXPECT_EQ(trimmed.find('\n'), std::string::npos) << "more than one line on stderr";
  }
}

}  // namespace
}  // namespace moe::test
