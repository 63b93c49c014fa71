// What the `moe` command promises on bad input, tried as a new user would, one class of mistake per test:
// outputs never replace an input and are never left half-written, the model's limits are kept, messages
// are one readable `error:` line (exit 2), options that would do nothing are refused, and the commands
// agree with one another.
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "moe/core/safetensors.h"
#include "random_moe_case.h"
#include "temp_dir.h"
#include "test_random.h"

#ifndef MOE_BINARY
#error "MOE_BINARY must name the moe executable (set by tests/cli/CMakeLists.txt)"
#endif

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModels = fs::path(MOE_TEST_DATA) / "models";
const fs::path kTokenizers = fs::path(MOE_TEST_DATA) / "tokenizers";

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct RunResult {
  int exit_code = -1;
  std::string out, err, command;
};

// Runs `moe ARGS` with its stdout and stderr captured in `scratch` (a directory no test output lands in).
RunResult moe(const fs::path& scratch, const std::vector<std::string>& args) {
  RunResult r;
  r.command = shell_quote(MOE_BINARY);
  for (const std::string& a : args) r.command += " " + shell_quote(a);
  const fs::path out = scratch / "stdout.txt", err = scratch / "stderr.txt";
  const int status = std::system(
      fmt::format("{} >{} 2>{} </dev/null", r.command, shell_quote(out.string()), shell_quote(err.string())).c_str());
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// Exit 2 and one line on stderr, "error: ..." containing `message`.
void expect_user_error(const RunResult& r, const std::string& message) {
  SCOPED_TRACE(r.command);
  EXPECT_EQ(r.exit_code, 2) << "stderr: " << r.err << "\nstdout: " << r.out;
  EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
  std::string trimmed = r.err;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
  EXPECT_EQ(trimmed.find('\n'), std::string::npos) << "more than one line on stderr: " << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << "expected '" << message << "' in: " << r.err;
}

#define EXPECT_SUCCESS(r) EXPECT_EQ((r).exit_code, 0) << (r).command << "\nstderr: " << (r).err << "\nstdout: " << (r).out

// Names of the files in `dir` (temporary files included).
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A random qwen3_moe block in `dir` (config.json, weights.safetensors, input.safetensors) and a scratch dir.
struct LayerCase {
  TempDir dir, scratch;
  MoeCase c;
  explicit LayerCase(const std::string& type = "qwen3_moe") {
    TestRng rng;
    c = random_moe_case(type, rng, {.tokens = 4});
    write_case(dir.path(), c);
  }
  std::vector<std::string> args(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {"layer",   "--config", (dir / "config.json").string(), "--weights",
                                  (dir / "weights.safetensors").string(), "--input",
                                  (dir / "input.safetensors").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  RunResult run(std::vector<std::string> extra) const { return moe(scratch.path(), args(std::move(extra))); }
  void write_config(const json& config) const { std::ofstream(dir / "config.json") << config.dump(2) << "\n"; }
};

// ---- nothing lost, nothing half-written ----------------------------------------------------------------

TEST(OutputSafety, AnOutputThatIsAnInputIsRefusedAndTheInputKept) {
  LayerCase lc;
  const std::string weights = (lc.dir / "weights.safetensors").string();
  const std::string before = read_file(weights);
  for (const char* name : {"weights.safetensors", "input.safetensors", "config.json"}) {
    for (const char* option : {"--output", "--stats"}) {
      SCOPED_TRACE(fmt::format("{} {}", option, name));
      std::vector<std::string> extra = {"--output", (lc.scratch / "y.safetensors").string()};
      if (std::string(option) == "--output") extra[1] = (lc.dir / name).string();
      else extra.insert(extra.end(), {"--stats", (lc.dir / name).string()});
      expect_user_error(lc.run(extra), "input: writing it would destroy it");
    }
  }
  // A hard link and a symbolic link to the weights are the weights too.
  fs::create_hard_link(weights, lc.scratch / "hard.safetensors");
  fs::create_symlink(weights, lc.scratch / "soft.safetensors");
  for (const char* link : {"hard.safetensors", "soft.safetensors"})
    expect_user_error(lc.run({"--output", (lc.scratch / link).string()}), "--weights input");
  EXPECT_EQ(read_file(weights), before);
  EXPECT_FALSE(fs::exists(lc.scratch / "y.safetensors"));
}

TEST(OutputSafety, AnOutputInsideTheCheckpointDirectoryIsRefused) {
  LayerCase lc;
  const fs::path ckpt = lc.dir / "ckpt";
  fs::create_directory(ckpt);
  fs::rename(lc.dir / "weights.safetensors", ckpt / "model.safetensors");
  std::vector<std::string> args = lc.args({"--output", (ckpt / "y.safetensors").string()});
  args[4] = ckpt.string();
  expect_user_error(moe(lc.scratch.path(), args), "lies inside the --weights directory");
  EXPECT_FALSE(fs::exists(ckpt / "y.safetensors"));

  TempDir scratch;
  const fs::path model = kModels / "qwen3_moe";
  // A copy of a fixture model, so that a bug could not harm the fixture itself.
  const fs::path copy = scratch / "model";
  fs::copy(model, copy);
  for (const char* option : {"--json", "--stats", "--trace-routing"})
    expect_user_error(moe(scratch.path(), {"generate", "--model", copy.string(), "--prompt-ids", "1,2", option,
                                           (copy / "out.json").string()}),
                      "lies inside the --model directory");
  EXPECT_FALSE(fs::exists(copy / "out.json"));
}

TEST(OutputSafety, BadOutputPathsAreRefusedBeforeTheWork) {
  LayerCase lc;
  const std::string y = (lc.scratch / "y.safetensors").string();
  const std::string missing_dir = (lc.scratch / "no" / "such" / "s.json").string();
  struct Case {
    std::vector<std::string> extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--output", lc.scratch.path().string()}, "is a directory"},
      {{"--output", (lc.scratch / "no" / "y.safetensors").string()}, "does not exist"},
      {{"--output", y, "--stats", missing_dir}, "--stats"},
      {{"--output", y, "--stats", y}, "name the same file"},
  };
  for (const Case& c : cases) {
    const RunResult r = lc.run(c.extra);
    expect_user_error(r, c.message);
    EXPECT_EQ(r.out, "") << "the work ran before the output was checked";
    EXPECT_FALSE(fs::exists(y));
  }
  // generate: a bad --json stops the run before the model loads, and no trace file is left.
  const std::string model = (kModels / "qwen3_moe").string();
  const std::string trace = (lc.scratch / "t.jsonl").string();
  const RunResult g = moe(lc.scratch.path(), {"generate", "--model", model, "--prompt-ids", "1,2", "--trace-routing", trace,
                                        "--json", missing_dir});
  expect_user_error(g, "--json");
  EXPECT_EQ(g.out, "");
  EXPECT_FALSE(fs::exists(trace));
  // bench: a bad --json before the timing.
  const RunResult b = moe(lc.scratch.path(), {"bench", "--shape", "custom:64,32,4,2", "--tokens", "1", "--repeats", "3",
                                        "--json", missing_dir});
  expect_user_error(b, "--json");
  EXPECT_EQ(b.out, "");
}

TEST(OutputSafety, AFailedRunLeavesNoFileAndKeepsAnOldOne) {
  LayerCase lc;
  // NaN in an expert weight makes the block's output NaN: the run fails after the work.
  MoeCase c = lc.c;
  for (auto& [name, tensor] : c.weights)
    if (name.find("experts.") != std::string::npos)
      for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data_as<float>()[i] = NAN;
  write_case(lc.dir.path(), c);
  const fs::path out = lc.scratch / "out";
  fs::create_directory(out);
  std::ofstream(out / "y.safetensors") << "an earlier result";
  const RunResult r = lc.run({"--output", (out / "y.safetensors").string(), "--stats", (out / "s.json").string(),
                        "--cpu-experts", "reference"});
  expect_user_error(r, "not finite");
  EXPECT_EQ(listing(out), std::vector<std::string>{"y.safetensors"});
  EXPECT_EQ(read_file(out / "y.safetensors"), "an earlier result");
}

TEST(OutputSafety, ASuccessfulRunReplacesTheFileAndLeavesNoTemporary) {
  LayerCase lc;
  const fs::path out = lc.scratch / "out";
  fs::create_directory(out);
  std::ofstream(out / "y.safetensors") << "an earlier result";
  EXPECT_SUCCESS(lc.run({"--output", (out / "y.safetensors").string(), "--stats", (out / "s.json").string()}));
  EXPECT_EQ(listing(out), (std::vector<std::string>{"s.json", "y.safetensors"}));
  EXPECT_TRUE(SafetensorsFile::open(out / "y.safetensors").contains("hidden_states"));
  EXPECT_TRUE(json::accept(read_file(out / "s.json")));
}

}  // namespace
}  // namespace moe::test
