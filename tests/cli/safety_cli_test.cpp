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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "moe/core/safetensors.h"
#include "random_moe_case.h"
#include "run_command.h"
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

TEST(OutputSafety, WriteModelRefusesADirectoryItCouldSpoil) {
  TempDir scratch, parent;
  const std::string model = (kModels / "qwen3_moe").string();
  std::ofstream(parent / "file.txt") << "kept\n";
  fs::create_directory(parent / "full");
  std::ofstream(parent / "full" / "notes.txt") << "kept\n";
  const auto write_model = [&](const fs::path& dir, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"bench", "--write-model", dir.string(), "--model-layers", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return moe(scratch.path(), args);
  };
  expect_user_error(write_model(parent / "full"), "exists and is not empty");
  expect_user_error(write_model(parent / "file.txt"), "is a file");
  expect_user_error(write_model(parent / "missing" / "m"), "does not exist: create it first");
  expect_user_error(write_model(kModels / "qwen3_moe" / "new", {"--model", model}), "lies inside --model");
  EXPECT_EQ(read_file(parent / "full" / "notes.txt"), "kept\n");
  EXPECT_EQ(read_file(parent / "file.txt"), "kept\n");
  EXPECT_EQ(listing(parent.path()), (std::vector<std::string>{"file.txt", "full"}));
  EXPECT_FALSE(fs::exists(kModels / "qwen3_moe" / "new"));
}

// The least address space (KiB, to 8 MiB) in which `moe --version` starts: the shared libraries' mappings,
// which differ between a CPU-only and a CUDA build (cuBLAS and NCCL map hundreds of MiB).
long startup_address_space_kb() {
  long low = 16 << 10, high = 16 << 20;
  while (high - low > (8 << 10)) {
    const long mid = (low + high) / 2;
    const std::string command =
        fmt::format("ulimit -v {} && exec {} --version >/dev/null 2>&1", mid, shell_quote(MOE_BINARY));
    const int status = std::system(fmt::format("sh -c {}", shell_quote(command)).c_str());
    (WIFEXITED(status) && WEXITSTATUS(status) == 0 ? high : low) = mid;
  }
  return high;
}

// A write that fails half-way (here: out of address space at its first tensor, a 125 MiB embedding, after
// config.json is written) leaves neither the directory nor its temporary behind.
TEST(OutputSafety, AFailedWriteModelLeavesNothing) {
  TempDir scratch, parent;
  // NOTE: 96 MiB over the start-up need: room for the thread pool and one malloc arena, not the embedding.
  const long limit_kb = startup_address_space_kb() + (96 << 10);
  const std::string command = fmt::format("ulimit -v {} && MALLOC_ARENA_MAX=1 exec {} --threads 1 bench "
                                          "--write-model {} --model-layers 1 2>{}",
                                          limit_kb, shell_quote(MOE_BINARY), shell_quote((parent / "m").string()),
                                          shell_quote((scratch / "err.txt").string()));
  const int status = std::system(fmt::format("sh -c {}", shell_quote(command)).c_str());
  const std::string err = read_file(scratch / "err.txt");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << err;
  EXPECT_NE(err.find("out of host memory allocating"), std::string::npos) << err;
  EXPECT_TRUE(listing(parent.path()).empty()) << listing(parent.path()).front();
}

// ---- limits the model has --------------------------------------------------------------------------

// A copy of the qwen3_moe fixture (max_position_embeddings 512) with its config edited by `edit`.
fs::path model_copy(const TempDir& dir, const std::string& family = "qwen3_moe") {
  const fs::path copy = dir / "model";
  fs::copy(kModels / family, copy);
  return copy;
}

std::string ids(int64_t n) {
  std::string list;
  for (int64_t i = 0; i < n; ++i) list += (i ? "," : "") + std::to_string(1 + i % 100);
  return list;
}

TEST(ModelLimits, APromptLongerThanTheContextIsRefused) {
  TempDir dir;
  const fs::path model = model_copy(dir);
  json config = json::parse(read_file(model / "config.json"));
  config["max_position_embeddings"] = 8;
  std::ofstream(model / "config.json") << config.dump(2);
  expect_user_error(moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", ids(9)}),
                    "prompt 0 has 9 tokens, more than the model's max_position_embeddings 8");
  // Prompt plus new tokens past the limit: generation stops at it, and says so.
  const RunResult r = moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", ids(5),
                                       "--max-new-tokens", "100", "--json", (dir / "out.json").string()});
  EXPECT_SUCCESS(r);
  EXPECT_NE(r.err.find("--max-new-tokens 100 capped at 3"), std::string::npos) << r.err;
  const json out = json::parse(read_file(dir / "out.json"));
  EXPECT_LE(out.at("generated_ids").size(), 3u);
  EXPECT_NE(r.out.find("reached max_position_embeddings"), std::string::npos) << r.out;
}

TEST(ModelLimits, HugeTokenCountsAreCappedOrNamed) {
  TempDir dir;
  const fs::path model = model_copy(dir);
  json config = json::parse(read_file(model / "config.json"));
  config["max_position_embeddings"] = 6;
  std::ofstream(model / "config.json") << config.dump(2);
  for (const char* n : {"2000000000", "9223372036854775807"}) {
    const RunResult r = moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", "1,2", "--max-new-tokens", n});
    EXPECT_SUCCESS(r);
    EXPECT_NE(r.err.find(fmt::format("--max-new-tokens {} capped at 4", n)), std::string::npos) << r.err;
  }
  expect_user_error(moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", "1",
                                     "--max-new-tokens", "9223372036854775808"}),
                    "9223372036854775808");
}

// ---- messages a person can read ------------------------------------------------------------------------

TEST(Messages, ADirectoryWhereAFileBelongsIsNamed) {
  LayerCase lc;
  const std::string d = (lc.dir / "a_directory").string();
  fs::create_directory(d);
  std::vector<std::string> args = lc.args({"--output", (lc.scratch / "y.safetensors").string()});
  args[2] = d;
  expect_user_error(moe(lc.scratch.path(), args), "config file '" + d + "' is a directory");
  expect_user_error(moe(lc.scratch.path(), {"plan", "--config", d, "--ranks", "1", "--device-memory", "80GiB",
                                            "--max-batched-tokens", "16"}),
                    "is a directory");
  expect_user_error(moe(lc.scratch.path(), {"tokenize", "--tokenizer", d, "--text", "hi"}),
                    "tokenizer file '" + d + "' is a directory");
  TempDir dir;
  const fs::path model = model_copy(dir);
  fs::remove(model / "config.json");
  fs::create_directory(model / "config.json");
  expect_user_error(moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", "1"}), "is a directory");
}

TEST(Messages, RangeErrorsSayTheBound) {
  TempDir dir;
  const RunResult r = moe(dir.path(), {"plan", "--config", (kModels / "qwen3_moe" / "config.json").string(), "--ranks",
                                       "0", "--device-memory", "80GiB", "--max-batched-tokens", "16"});
  expect_user_error(r, "--ranks: must be > 0, got 0");
  EXPECT_EQ(r.err.find("179769"), std::string::npos) << r.err;
  expect_user_error(moe(dir.path(), {"bench", "--max-gib", "0"}), "--max-gib: must be > 0, got 0");
}

TEST(Messages, TheKeyTheFileUsesIsNamed) {
  LayerCase lc("mixtral");
  const std::vector<std::string> out = {"--output", (lc.scratch / "y.safetensors").string()};
  json config = lc.c.config;
  config.erase("num_experts");
  config["num_local_experts"] = 1e15;
  lc.write_config(config);
  expect_user_error(lc.run(out), "'num_local_experts' = 1000000000000000 is out of range");
  config = lc.c.config;
  config.erase("model_type");
  lc.write_config(config);
  expect_user_error(lc.run(out), "config.json has no 'model_type'");
}

TEST(Messages, OlmoeExpertSizeIsItsOwnKey) {
  LayerCase lc("olmoe");
  MoeCase c = lc.c;
  for (auto& [name, tensor] : c.weights)
    if (name == "experts.0.gate_proj.weight") {
      std::vector<int64_t> shape = tensor.shape();
      shape[0] += 1;
      TestRng rng;
      tensor = rng.normal_tensor(shape, 0.1f, tensor.dtype());
    }
  write_case(lc.dir.path(), c);
  const RunResult r = lc.run({"--output", (lc.scratch / "y.safetensors").string()});
  expect_user_error(r, "(intermediate_size ");
  EXPECT_EQ(r.err.find("moe_intermediate_size"), std::string::npos) << r.err;
}

TEST(Messages, PrefixMistakesGetAHint) {
  LayerCase lc;
  write_case(lc.dir.path(), lc.c, "model.layers.0.mlp.");
  const std::vector<std::string> out = {"--output", (lc.scratch / "y.safetensors").string()};
  expect_user_error(lc.run(out), "give the block prefix, e.g. 'model.layers.0.mlp.'");
  std::vector<std::string> no_dot = out;
  no_dot.insert(no_dot.end(), {"--prefix", "model.layers.0.mlp"});
  expect_user_error(lc.run(no_dot), "lacks its trailing dot: 'model.layers.0.mlp.'");
}

TEST(Messages, InvalidUtf8IsPrintedEscaped) {
  TempDir dir;
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << "{\"model\": \"\xff\xfe\"";
  const RunResult r = moe(dir.path(), {"tokenize", "--tokenizer", (dir / "tokenizer.json").string(), "--text", "hi"});
  expect_user_error(r, "\\xff");
  EXPECT_EQ(r.err.find('\xff'), std::string::npos) << "raw byte on stderr";
}

// The documented launch (`mpirun -q`, docs/cli.md): one error line, exit 2, and none of mpirun's banner.
TEST(Messages, UnderMpirunTheErrorIsPrintedOnceWithoutABanner) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  TempDir dir;
  const std::string command = fmt::format(
      "mpirun -q --allow-run-as-root --oversubscribe -np 2 {} generate --model {} --prompt-ids 1,99999 --ep",
      MOE_BINARY, (kModels / "qwen3_moe").string());
  const int status = std::system(fmt::format("{} >{} 2>&1", command, (dir / "all.txt").string()).c_str());
  const std::string all = read_file(dir / "all.txt");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << all;
  EXPECT_EQ(all, "error: prompt 0: token id 99999 is outside the vocabulary [0, 2048)\n");
}

// Every mpirun command line the README and docs/cli.md show passes -q (the banner is mpirun's to print).
TEST(Messages, DocumentedMpirunCommandLinesAreQuiet) {
  const std::filesystem::path root = std::filesystem::path(MOE_TEST_DATA).parent_path().parent_path();
  int lines = 0;
  for (const char* doc : {"README.md", "docs/cli.md"}) {
    std::istringstream text(read_file(root / doc));
    for (std::string line; std::getline(text, line);) {
      if (!line.starts_with("mpirun ")) continue;
      ++lines;
      EXPECT_TRUE(line.starts_with("mpirun -q ")) << doc << ": " << line;
    }
  }
  EXPECT_GE(lines, 3);
}

// ---- options that do nothing ---------------------------------------------------------------------------

TEST(IdleOptions, AreRefused) {
  LayerCase lc;
  const std::vector<std::string> out = {"--output", (lc.scratch / "y.safetensors").string()};
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--capacity-factor", "2"},
                                               std::vector<std::string>{"--overflow", "renormalize"}}) {
    std::vector<std::string> args = out;
    args.insert(args.end(), extra.begin(), extra.end());
    expect_user_error(lc.run(args), "add --paradigm padded");
  }
  TempDir dir;
  const std::string model = (kModels / "qwen3_moe").string();
  for (const char* option : {"--seed", "--top-p", "--top-k"})
    expect_user_error(moe(dir.path(), {"generate", "--model", model, "--prompt-ids", "1", "--temperature", "0",
                                       option, std::string(option) == "--top-p" ? "0.5" : "3"}),
                      "add --temperature");
  for (const char* seed : {"-1", "18446744073709551616", "1.5"})
    expect_user_error(moe(dir.path(), {"generate", "--model", model, "--prompt-ids", "1", "--temperature", "1",
                                       "--seed", seed}),
                      fmt::format("--seed '{}'", seed));
  expect_user_error(moe(dir.path(), {"tokenize", "--model", model, "--decode", "1", "--no-special-tokens"}),
                    "--no-special-tokens");
}

TEST(BuildInfo, VersionAndInfoNameTheBuild) {
  TempDir dir;
  for (const char* args : {"--version", "info"}) {
    const RunResult r = moe(dir.path(), {args});
    EXPECT_SUCCESS(r);
    for (const char* part : {"moe ", "CUDA: ", "NCCL: ", "MPI: ", "CPU ISA: "})
      EXPECT_NE(r.out.find(part), std::string::npos) << args << ": " << r.out;
  }
}

TEST(BuildInfo, InfoModelPrintsTheHostMemoryOfARun) {
  TempDir dir;
  const RunResult r = moe(dir.path(), {"info", "--model", (kModels / "mixtral").string()});
  EXPECT_SUCCESS(r);
  EXPECT_NE(r.out.find("host memory of a CPU run: about "), std::string::npos) << r.out;
  expect_user_error(moe(dir.path(), {"info", "--model", (dir / "absent").string()}), "is not a directory");
  const RunResult plan = moe(dir.path(), {"plan", "--config", (kModels / "mixtral" / "config.json").string(), "--ranks",
                                          "2", "--device-memory", "80GiB", "--max-batched-tokens", "16"});
  EXPECT_SUCCESS(plan);
  EXPECT_NE(plan.out.find("host memory of one CPU process running the whole model: about "), std::string::npos)
      << plan.out;
}

// ---- consistency a user relies on ----------------------------------------------------------------------

TEST(Consistency, TokenizeAndGenerateAddTheSameSpecialTokens) {
  TempDir dir;
  const std::string model = (kModels / "mixtral").string();
  const RunResult tok = moe(dir.path(), {"tokenize", "--model", model, "--text", "Hello world"});
  EXPECT_SUCCESS(tok);
  EXPECT_TRUE(tok.out.starts_with("1 ")) << "Mixtral's <s> (id 1) leads: " << tok.out;
  const RunResult bare = moe(dir.path(), {"tokenize", "--model", model, "--text", "Hello world", "--no-special-tokens"});
  EXPECT_SUCCESS(bare);
  EXPECT_EQ("1 " + bare.out, tok.out);
  const RunResult gen = moe(dir.path(), {"generate", "--model", model, "--prompt", "Hello world", "--max-new-tokens",
                                         "0", "--json", (dir / "g.json").string()});
  EXPECT_SUCCESS(gen);
  std::string listed;
  const json result = json::parse(read_file(dir / "g.json"));
  for (const json& id : result.at("prompt_ids"))
    listed += (listed.empty() ? "" : " ") + std::to_string(id.get<int>());
  EXPECT_EQ(listed + "\n", tok.out);
}

TEST(Consistency, PromptIdsRunWithABrokenTokenizer) {
  TempDir dir;
  const fs::path model = model_copy(dir);
  std::ofstream(model / "tokenizer.json", std::ios::trunc) << "{ broken";
  const RunResult ids = moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", "1,2",
                                         "--max-new-tokens", "2"});
  EXPECT_SUCCESS(ids);
  EXPECT_NE(ids.out.find("generated ids:"), std::string::npos) << ids.out;
  expect_user_error(moe(dir.path(), {"generate", "--model", model.string(), "--prompt", "hi"}), "tokenizer.json");
}

TEST(Consistency, GenerationConfigSetsTheSamplingDefaults) {
  TempDir dir;
  const fs::path model = model_copy(dir);
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "--model", model.string(), "--prompt-ids", "1,2,3",
                                     "--max-new-tokens", "12", "--json", (dir / "g.json").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const RunResult r = moe(dir.path(), args);
    EXPECT_SUCCESS(r);
    return json::parse(read_file(dir / "g.json")).at("generated_ids");
  };
  // Without do_sample the file's numbers are transformers' unused defaults: greedy.
  json generation = json::parse(read_file(model / "generation_config.json"));
  generation["temperature"] = 5.0;
  std::ofstream(model / "generation_config.json", std::ios::trunc) << generation.dump();
  const json greedy = run({});
  EXPECT_EQ(run({"--temperature", "0"}), greedy);
  // do_sample: the file's temperature and top_p, transformers' top_k 50 where the file has none.
  generation["do_sample"] = true;
  generation["top_p"] = 0.9;
  std::ofstream(model / "generation_config.json", std::ios::trunc) << generation.dump();
  const json sampled = run({"--seed", "7"});
  EXPECT_EQ(sampled, run({"--seed", "7", "--temperature", "5", "--top-p", "0.9", "--top-k", "50"}));
  EXPECT_NE(sampled, greedy);
  EXPECT_EQ(run({"--temperature", "0"}), greedy);
  generation["top_p"] = 7;
  std::ofstream(model / "generation_config.json", std::ios::trunc) << generation.dump();
  expect_user_error(moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", "1"}),
                    "generation_config.json: top_p must be in (0, 1]");
}

TEST(Consistency, ThreadsFlagSetsThePool) {
  TempDir dir;
  const RunResult r = moe(dir.path(), {"info", "--threads", "3"});
  EXPECT_SUCCESS(r);
  EXPECT_NE(r.out.find("cpu: 3 threads"), std::string::npos) << r.out;
  expect_user_error(moe(dir.path(), {"info", "--threads", "0"}), "--threads");
}

TEST(Consistency, HelpShowsDefaults) {
  TempDir dir;
  const RunResult r = moe(dir.path(), {"generate", "--help"});
  EXPECT_SUCCESS(r);
  for (const char* shown : {"--max-new-tokens INT=32", "--max-batched-tokens INT=4096", "--backend TEXT:{cpu,cuda}=cpu",
                            "--seed TEXT=0"})
    EXPECT_NE(r.out.find(shown), std::string::npos) << shown << " in\n" << r.out;
}

// ---- non-finite values ---------------------------------------------------------------------------------

TEST(NonFinite, ANaNExpertIsNamedInLayer) {
  LayerCase lc("mixtral");
  MoeCase c = lc.c;
  const std::string victim = "experts.1.w2.weight";
  for (auto& [name, tensor] : c.weights)
    if (name == victim) tensor.data_as<float>()[0] = NAN;
  write_case(lc.dir.path(), c);
  const RunResult r = lc.run({"--output", (lc.scratch / "y.safetensors").string(), "--cpu-experts", "reference"});
  // Expert 1 may be chosen by no token of this input: then the output is finite, and that is right too.
  if (r.exit_code == 0) GTEST_SKIP() << "no token chose expert 1";
  expect_user_error(r, "the MoE block's output is not finite");
  // The experts named are those every non-finite token chose: expert 1 among them.
  const size_t named = r.err.find("expert"), explains = r.err.find(" explains it");
  ASSERT_TRUE(named != std::string::npos && explains != std::string::npos) << r.err;
  const std::string list = r.err.substr(named, explains - named) + ",";
  EXPECT_TRUE(list.find(" 1,") != std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(lc.scratch / "y.safetensors"));
}

TEST(NonFinite, ANaNExpertFailsGenerateNamingTheLayer) {
  TempDir dir;
  const fs::path model = model_copy(dir);
  const fs::path weights = model / "model.safetensors";
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    const SafetensorsFile file = SafetensorsFile::open(weights);
    for (const std::string& name : file.names()) {
      const Tensor mapped = file.get(name);
      Tensor t = Tensor::empty(mapped.dtype(), mapped.shape());  // a copy: the mapping goes away
      std::memcpy(t.data(), mapped.data(), mapped.nbytes());
      if (name.starts_with("model.layers.1.mlp.experts.") && name.ends_with("down_proj.weight")) {
        ASSERT_EQ(t.dtype(), DType::F32);
        for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = NAN;
      }
      tensors.emplace_back(name, t);
    }
  }
  write_safetensors(weights, tensors);
  expect_user_error(moe(dir.path(), {"generate", "--model", model.string(), "--prompt-ids", "1,2,3",
                                     "--cpu-experts", "reference"}),
                    "layer 1: the MoE block's output is not finite");
}

}  // namespace
}  // namespace moe::test
