// End-to-end tests of `moe layer`: the real binary runs on random blocks of every model family written to
// disk, and its output is compared with the float64 oracle (tests/support/moe_reference_f64), computed from
// the same stored (rounded) weights and input. Bad inputs must exit with code 2 and a one-line
// "error: ..." on stderr that names the problem.

#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"
#include "moe_reference_f64.h"
#include "random_moe_case.h"
#include "run_command.h"
#include "scoped_env.h"
#include "temp_dir.h"
#include "test_random.h"

#ifndef MOE_BINARY
#error "MOE_BINARY must name the moe executable (set by tests/cli/CMakeLists.txt)"
#endif

namespace moe {
// Test names and failure messages show "BF16", not a byte dump.
static void PrintTo(DType dtype, std::ostream* os) {
  *os << dtype_name(dtype);
}
}  // namespace moe

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kTolerance = 1e-5;  // normwise relative error of hidden_states and topk_weights
// Tokens whose deciding selection scores lie closer than this may legitimately route differently in fp32;
// they are left out of the comparison (and there must be few of them).
constexpr double kAmbiguousMargin = 1e-5;

// ---- running the binary ------------------------------------------------------------------------------

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  int exit_code = -1;
  std::string out;      // stdout
  std::string err;      // stderr
  std::string command;  // for failure messages
};

// Runs `moe ARGS...`, capturing stdout and stderr into files of `dir`.
RunResult run_moe(const TempDir& dir, const std::vector<std::string>& args) {
  RunResult r;
  r.command = shell_quote(MOE_BINARY);
  for (const std::string& a : args) {
    r.command += ' ';
    r.command += shell_quote(a);
  }
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string full =
      fmt::format("{} >{} 2>{} </dev/null", r.command, shell_quote(out.string()), shell_quote(err.string()));
  const int status = std::system(full.c_str());
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// `moe layer` on the files write_case writes into `dir`, plus `extra` options.
std::vector<std::string> layer_args(const TempDir& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"layer",
                                   "--config",
                                   (dir / "config.json").string(),
                                   "--weights",
                                   (dir / "weights.safetensors").string(),
                                   "--input",
                                   (dir / "input.safetensors").string(),
                                   "--output",
                                   (dir / "y.safetensors").string(),
                                   // the oracle comparisons are at 1e-5: the fp64-accumulated experts
                                   "--cpu-experts",
                                   "reference"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Replaces the value following `option` in args.
void set_option(std::vector<std::string>& args, const std::string& option, const std::string& value) {
  const auto it = std::find(args.begin(), args.end(), option);
  ASSERT_TRUE(it != args.end() && it + 1 != args.end()) << option;
  *(it + 1) = value;
}

bool contains_ci(std::string haystack, std::string needle) {
  auto lower = [](std::string& s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  };
  lower(haystack);
  lower(needle);
  return haystack.find(needle) != std::string::npos;
}

#define EXPECT_SUCCESS(run) \
  EXPECT_EQ((run).exit_code, 0) << (run).command << "\nstderr: " << (run).err << "\nstdout: " << (run).out

// Exit code 2, one line on stderr starting with "error:", containing one of `keywords` (any case).
void expect_user_error(const RunResult& r, std::vector<std::string> keywords) {
  SCOPED_TRACE(r.command);
  EXPECT_EQ(r.exit_code, 2) << "stderr: " << r.err;
  EXPECT_TRUE(r.err.starts_with("error:")) << "stderr: " << r.err;
  std::string trimmed = r.err;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
  EXPECT_EQ(trimmed.find('\n'), std::string::npos) << "more than one line on stderr: " << r.err;
  if (keywords.empty()) return;
  const bool found = std::any_of(keywords.begin(), keywords.end(),
                                 [&](const std::string& k) { return contains_ci(r.err, k); });
  EXPECT_TRUE(found) << "expected one of {" << fmt::format("{}", fmt::join(keywords, ", "))
                     << "} in: " << r.err;
}

// ---- comparing with the oracle -----------------------------------------------------------------------

ReferenceResult reference(const MoeCase& c, const std::vector<std::pair<std::string, Tensor>>& weights,
                          const PaddedOptions* padded = nullptr) {
  const auto weight = [&weights](const std::string& name) {
    for (const auto& [n, t] : weights)
      if (n == name) return t;
    return Tensor();
  };
  return moe_reference_f64(c.config, weight, c.x, padded);
}

ReferenceResult reference(const MoeCase& c, const PaddedOptions* padded = nullptr) {
  return reference(c, c.weights, padded);
}

int64_t count_ambiguous(const ReferenceResult& ref) {
  return std::count_if(ref.selection_margin.begin(), ref.selection_margin.end(),
                       [](double m) { return m < kAmbiguousMargin; });
}

// Compares Y (hidden_states, topk_ids, topk_weights) with the oracle. In the padded paradigm one token
// routed differently changes which pairs of later tokens are dropped, so hidden_states is only compared
// when no token is ambiguous.
void expect_matches(const fs::path& y_path, const ReferenceResult& ref, bool padded = false) {
  const int64_t T = ref.tokens, H = ref.hidden, K = ref.top_k;
  const SafetensorsFile y = SafetensorsFile::open(y_path);
  for (const char* name : {"hidden_states", "topk_ids", "topk_weights"})
    ASSERT_TRUE(y.contains(name)) << y_path << " lacks " << name;
  const Tensor hidden = y.get("hidden_states"), ids = y.get("topk_ids"), weights = y.get("topk_weights");
  EXPECT_EQ(hidden.dtype(), DType::F32);
  EXPECT_EQ(ids.dtype(), DType::I32);
  EXPECT_EQ(weights.dtype(), DType::F32);
  ASSERT_EQ(hidden.shape(), (std::vector<int64_t>{T, H}));
  ASSERT_EQ(ids.shape(), (std::vector<int64_t>{T, K}));
  ASSERT_EQ(weights.shape(), (std::vector<int64_t>{T, K}));
  ASSERT_TRUE(ids.dtype() == DType::I32 && dtype_is_float(weights.dtype()) && dtype_is_float(hidden.dtype()));
  const int32_t* id = ids.data_as<int32_t>();
  const Tensor wf = weights.to_f32(), hf = hidden.to_f32();
  const float* w = wf.data_as<float>();
  const float* out = hf.data_as<float>();

  const int64_t ambiguous = count_ambiguous(ref);
  EXPECT_LE(ambiguous, std::max<int64_t>(1, T / 8))
      << "too many near-tied tokens for a meaningful comparison";
  int64_t set_mismatches = 0, order_mismatches = 0;
  std::string first_mismatch;
  double w_scale = 1e-30, w_worst = 0.0, h_scale = 1e-30, h_worst = 0.0;
  for (double v : ref.weights) w_scale = std::max(w_scale, std::fabs(v));
  for (double v : ref.out) h_scale = std::max(h_scale, std::fabs(v));
  for (int64_t t = 0; t < T; ++t) {
    if (ref.selection_margin[t] < kAmbiguousMargin) continue;
    std::vector<int32_t> got(id + t * K, id + (t + 1) * K),
        want(ref.ids.begin() + t * K, ref.ids.begin() + (t + 1) * K);
    if (got != want) {
      ++order_mismatches;
      if (first_mismatch.empty())
        first_mismatch =
            fmt::format("token {}: got [{}], expected [{}]", t, fmt::join(got, ", "), fmt::join(want, ", "));
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      if (got != want) ++set_mismatches;
      continue;
    }
    for (int64_t j = 0; j < K; ++j) {
      const double diff = std::fabs(double{w[t * K + j]} - ref.weights[t * K + j]);
      w_worst = std::isnan(diff) ? INFINITY : std::max(w_worst, diff);
    }
    if (padded && ambiguous > 0) continue;
    for (int64_t h = 0; h < H; ++h) {
      const double diff = std::fabs(double{out[t * H + h]} - ref.out[t * H + h]);
      h_worst = std::isnan(diff) ? INFINITY : std::max(h_worst, diff);
    }
  }
  EXPECT_EQ(set_mismatches, 0) << "tokens whose expert set differs; first: " << first_mismatch;
  EXPECT_EQ(order_mismatches, 0) << "tokens whose expert order differs; first: " << first_mismatch;
  EXPECT_LE(w_worst / w_scale, kTolerance)
      << "topk_weights: max |diff| " << w_worst << ", max |ref| " << w_scale;
  EXPECT_LE(h_worst / h_scale, kTolerance)
      << "hidden_states: max |diff| " << h_worst << ", max |ref| " << h_scale;
}

// Normwise relative difference of two tool outputs' hidden_states.
double hidden_difference(const fs::path& a, const fs::path& b) {
  const SafetensorsFile fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  return max_rel_error(fa.get("hidden_states"), fb.get("hidden_states"));
}

// ---- --stats -------------------------------------------------------------------------------------------

// The first value called `key` anywhere in `j` (the stats file may nest per-layer sections).
const json* find_recursive(const json& j, const std::string& key) {
  if (j.is_object()) {
    if (const auto it = j.find(key); it != j.end()) return &*it;
    for (const auto& item : j.items())
      if (const json* found = find_recursive(item.value(), key)) return found;
  } else if (j.is_array()) {
    for (const json& item : j)
      if (const json* found = find_recursive(item, key)) return found;
  }
  return nullptr;
}

// A per-expert count as a vector (from an array, or an object keyed by expert index), or a total.
std::vector<int64_t> as_counts(const json& j, int64_t experts) {
  std::vector<int64_t> counts;
  if (j.is_number_integer()) return {j.get<int64_t>()};
  if (j.is_array()) {
    for (const json& v : j) counts.push_back(v.get<int64_t>());
  } else if (j.is_object()) {
    counts.assign(experts, 0);
    for (const auto& item : j.items()) counts.at(std::stoll(item.key())) = item.value().get<int64_t>();
  } else {
    ADD_FAILURE() << "unexpected count value " << j.dump();
  }
  return counts;
}

int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

void expect_stats(const fs::path& stats_path, const ReferenceResult& ref) {
  SCOPED_TRACE(stats_path.string());
  json stats;
  ASSERT_NO_THROW(stats = json::parse(read_text(stats_path))) << read_text(stats_path);
  const json* per_expert = find_recursive(stats, "tokens_per_expert");
  const json* dropped = find_recursive(stats, "dropped_pairs");
  ASSERT_NE(per_expert, nullptr) << "no tokens_per_expert in " << stats.dump();
  ASSERT_NE(dropped, nullptr) << "no dropped_pairs in " << stats.dump();
  const std::vector<int64_t> counts = as_counts(*per_expert, ref.experts);
  EXPECT_EQ(static_cast<int64_t>(counts.size()), ref.experts) << per_expert->dump();
  EXPECT_EQ(total(counts), ref.tokens * ref.top_k) << per_expert->dump();
  if (count_ambiguous(ref) == 0) {
    EXPECT_EQ(counts, ref.tokens_per_expert);
    EXPECT_EQ(total(as_counts(*dropped, ref.experts)), ref.dropped_pairs) << dropped->dump();
  }
}

// ---- matching the oracle -------------------------------------------------------------------------------

std::vector<std::string> model_types() {
  return {std::begin(kMoeModelTypes), std::end(kMoeModelTypes)};
}

std::string type_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

using FamilyAndDtype = std::tuple<std::string, DType>;

class LayerMatchesReference : public ::testing::TestWithParam<FamilyAndDtype> {};

// Random blocks with each input dtype (and one of a single token): outputs, routing and stats match.
TEST_P(LayerMatchesReference, RandomBlocks) {
  const auto& [type, weight_dtype] = GetParam();
  TestRng rng;
  struct Variant {
    DType input;
    int64_t tokens;
  };
  const DType any_input = std::array{DType::F32, DType::BF16, DType::F16}[rng.uniform_int(0, 2)];
  for (const Variant v :
       {Variant{DType::F32, 0}, Variant{DType::BF16, 0}, Variant{DType::F16, 0}, Variant{any_input, 1}}) {
    SCOPED_TRACE(fmt::format("input {}, T {}", dtype_name(v.input), v.tokens));
    const MoeCase c = random_moe_case(
        type, rng, {.weight_dtype = weight_dtype, .input_dtype = v.input, .tokens = v.tokens});
    SCOPED_TRACE("config: " + c.config.dump());
    TempDir dir;
    write_case(dir.path(), c);
    std::vector<std::string> extra = {"--stats", (dir / "stats.json").string()};
    if (v.input == DType::F16) extra.insert(extra.end(), {"--paradigm", "contiguous", "--backend", "cpu"});
    const RunResult run = run_moe(dir, layer_args(dir, extra));
    EXPECT_SUCCESS(run);
    if (run.exit_code != 0) continue;
    const ReferenceResult ref = reference(c);
    expect_matches(dir / "y.safetensors", ref);
    expect_stats(dir / "stats.json", ref);
  }
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, LayerMatchesReference,
                         ::testing::Combine(::testing::ValuesIn(model_types()),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16)),
                         [](const ::testing::TestParamInfo<FamilyAndDtype>& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

// ---- the padded paradigm -------------------------------------------------------------------------------

class LayerPadded : public ::testing::TestWithParam<std::string> {};

// Small capacities drop pairs exactly as the oracle does (drop and renormalize); a huge capacity equals the
// contiguous paradigm.
TEST_P(LayerPadded, CapacityAndOverflow) {
  const std::string& type = GetParam();
  TestRng rng;
  const int64_t experts = std::array<int64_t, 5>{4, 6, 8, 12, 16}[rng.uniform_int(0, 4)];
  // NOTE: T * k = 32 * k >= 4 E, so a capacity factor of 0.5 must drop pairs.
  const CaseOptions opt{.weight_dtype = DType::BF16,
                        .input_dtype = DType::F32,
                        .tokens = 32,
                        .experts = experts,
                        .top_k = rng.uniform_int(2, std::min<int64_t>(experts, 8))};
  const MoeCase c = random_moe_case(type, rng, opt);
  SCOPED_TRACE("config: " + c.config.dump());
  TempDir dir;
  write_case(dir.path(), c);

  const RunResult contiguous = run_moe(dir, layer_args(dir));
  EXPECT_SUCCESS(contiguous);
  if (contiguous.exit_code == 0) fs::rename(dir / "y.safetensors", dir / "y_contiguous.safetensors");

  for (const double factor : {0.5, 1.0}) {
    for (const bool renormalize : {false, true}) {
      SCOPED_TRACE(fmt::format("capacity factor {}, {}", factor, renormalize ? "renormalize" : "drop"));
      const PaddedOptions padded{.capacity_factor = factor, .renormalize = renormalize};
      const ReferenceResult ref = reference(c, &padded);
      if (factor == 0.5) {
        EXPECT_GT(ref.dropped_pairs, 0);
      }
      const RunResult run = run_moe(
          dir, layer_args(
                   dir, {"--paradigm", "padded", "--capacity-factor", fmt::format("{}", factor), "--overflow",
                         renormalize ? "renormalize" : "drop", "--stats", (dir / "stats.json").string()}));
      EXPECT_SUCCESS(run);
      if (run.exit_code != 0) continue;
      expect_matches(dir / "y.safetensors", ref, /*padded=*/true);
      expect_stats(dir / "stats.json", ref);
    }
  }

  const PaddedOptions huge{.capacity_factor = 1000.0, .renormalize = false};
  const ReferenceResult ref = reference(c, &huge);
  EXPECT_EQ(ref.dropped_pairs, 0);
  const RunResult run = run_moe(dir, layer_args(dir, {"--paradigm", "padded", "--capacity-factor", "1000"}));
  EXPECT_SUCCESS(run);
  if (run.exit_code != 0 || contiguous.exit_code != 0) return;
  expect_matches(dir / "y.safetensors", ref, /*padded=*/true);
  EXPECT_LE(hidden_difference(dir / "y.safetensors", dir / "y_contiguous.safetensors"), kTolerance)
      << "padded with a huge capacity differs from contiguous";
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, LayerPadded, ::testing::ValuesIn(model_types()), type_name);

// ---- checkpoints: --prefix, directories, shards
// ------------------------------------------------------------

std::string block_prefix(const std::string& type, int layer) {
  return fmt::format("model.layers.{}.{}", layer, type == "mixtral" ? "block_sparse_moe." : "mlp.");
}

class LayerCheckpoint : public ::testing::TestWithParam<std::string> {};

// One file holding two blocks of one config: --prefix picks each.
TEST_P(LayerCheckpoint, PrefixSelectsTheBlock) {
  const std::string& type = GetParam();
  TestRng rng;
  const MoeCase c = random_moe_case(type, rng, {.weight_dtype = DType::BF16, .input_dtype = DType::BF16});
  const auto other = random_moe_weights(c.config, rng, DType::BF16);
  const std::string p0 = block_prefix(type, 0), p3 = block_prefix(type, 3);
  TempDir dir;
  write_case(dir.path(), c);
  auto both = prefixed(c.weights, p0);
  for (auto& named : prefixed(other, p3)) both.push_back(named);
  write_safetensors(dir / "weights.safetensors", both);

  RunResult run = run_moe(dir, layer_args(dir, {"--prefix", p3}));
  EXPECT_SUCCESS(run);
  if (run.exit_code == 0) expect_matches(dir / "y.safetensors", reference(c, other));
  run = run_moe(dir, layer_args(dir, {"--prefix", p0}));
  EXPECT_SUCCESS(run);
  if (run.exit_code == 0) expect_matches(dir / "y.safetensors", reference(c));
}

// --weights as a directory: sharded (model.safetensors.index.json) with --prefix, and a single
// model.safetensors.
TEST_P(LayerCheckpoint, Directories) {
  const std::string& type = GetParam();
  TestRng rng;
  const MoeCase c = random_moe_case(type, rng, {.weight_dtype = DType::F16, .input_dtype = DType::F32});
  const auto other = random_moe_weights(c.config, rng, DType::F16);
  const std::string p1 = block_prefix(type, 1), p2 = block_prefix(type, 2);
  TempDir dir;
  write_case(dir.path(), c);

  auto both = prefixed(other, p1);
  uint64_t bytes = 0;
  for (auto& named : prefixed(c.weights, p2)) both.push_back(named);
  for (const auto& [name, t] : both) bytes += t.nbytes();
  write_sharded_checkpoint(dir / "sharded", both, bytes / 4);
  ASSERT_TRUE(fs::exists(dir / "sharded" / "model.safetensors.index.json"));
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(dir / "sharded"))
    shards += entry.path().extension() == ".safetensors";
  EXPECT_GE(shards, 3);

  std::vector<std::string> args = layer_args(dir, {"--prefix", p2});
  set_option(args, "--weights", (dir / "sharded").string());
  RunResult run = run_moe(dir, args);
  EXPECT_SUCCESS(run);
  if (run.exit_code == 0) expect_matches(dir / "y.safetensors", reference(c));

  fs::create_directories(dir / "single");
  write_safetensors(dir / "single" / "model.safetensors", c.weights);
  args = layer_args(dir);
  set_option(args, "--weights", (dir / "single").string());
  run = run_moe(dir, args);
  EXPECT_SUCCESS(run);
  if (run.exit_code == 0) expect_matches(dir / "y.safetensors", reference(c));
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, LayerCheckpoint, ::testing::ValuesIn(model_types()), type_name);

// ---- bad input
// ---------------------------------------------------------------------------------------------

void write_config(const TempDir& dir, const json& config) {
  std::ofstream(dir / "config.json") << config.dump(2) << "\n";
}

TEST(LayerBadInput, MissingTensorIsNamed) {
  TestRng rng;
  for (const std::string& type : model_types()) {
    SCOPED_TRACE(type);
    MoeCase c = random_moe_case(type, rng, {.tokens = 4});
    const auto victim = c.weights.begin() + rng.uniform_int(0, static_cast<int64_t>(c.weights.size()) - 1);
    const std::string name = victim->first;
    c.weights.erase(victim);
    TempDir dir;
    write_case(dir.path(), c);
    expect_user_error(run_moe(dir, layer_args(dir)), {name});
  }
}

TEST(LayerBadInput, WrongShapedTensorIsNamed) {
  TestRng rng;
  for (const std::string& type : model_types()) {
    SCOPED_TRACE(type);
    MoeCase c = random_moe_case(type, rng, {.tokens = 4});
    auto& [name, tensor] = c.weights[rng.uniform_int(0, static_cast<int64_t>(c.weights.size()) - 1)];
    std::vector<int64_t> shape = tensor.shape();
    shape.back() += 1;
    tensor = rng.normal_tensor(shape, 0.1f, tensor.dtype());
    TempDir dir;
    write_case(dir.path(), c);
    expect_user_error(run_moe(dir, layer_args(dir)), {name});
  }
}

TEST(LayerBadInput, TopKLargerThanExperts) {
  TestRng rng;
  for (const std::string type : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}) {
    SCOPED_TRACE(type);
    MoeCase c = random_moe_case(type, rng, {.tokens = 4, .experts = 4, .top_k = 2});
    TempDir dir;
    write_case(dir.path(), c);
    c.config["num_experts_per_tok"] = 5;
    write_config(dir, c.config);
    expect_user_error(run_moe(dir, layer_args(dir)), {"num_experts_per_tok"});
  }
}

// DeepSeek groups: n_group must divide the experts, and the kept groups must hold k experts.
TEST(LayerBadInput, DeepseekGroups) {
  TestRng rng;
  for (const std::string type : {"deepseek_v2", "deepseek_v3"}) {
    SCOPED_TRACE(type);
    MoeCase c = random_moe_case(type, rng, {.tokens = 4, .experts = 8, .top_k = 4});
    TempDir dir;
    write_case(dir.path(), c);
    json config = c.config;
    if (type == "deepseek_v2") config["topk_method"] = "group_limited_greedy";
    config["n_group"] = 3;
    config["topk_group"] = 1;
    write_config(dir, config);
    expect_user_error(run_moe(dir, layer_args(dir)), {"n_group"});
    config["n_group"] = 4;  // groups of 2; 1 group kept cannot hold 4 experts
    write_config(dir, config);
    expect_user_error(run_moe(dir, layer_args(dir)), {"topk_group"});
  }
}

TEST(LayerBadInput, UnknownModelType) {
  TestRng rng;
  MoeCase c = random_moe_case("qwen3_moe", rng, {.tokens = 4});
  TempDir dir;
  write_case(dir.path(), c);
  c.config["model_type"] = "qwen9_moe";
  write_config(dir, c.config);
  expect_user_error(run_moe(dir, layer_args(dir)), {"qwen9_moe"});
}

TEST(LayerBadInput, NaNInInput) {
  TestRng rng;
  MoeCase c = random_moe_case("mixtral", rng, {.tokens = 6});
  c.x.data_as<float>()[rng.uniform_int(0, c.x.numel() - 1)] = NAN;
  TempDir dir;
  write_case(dir.path(), c);
  expect_user_error(run_moe(dir, layer_args(dir)), {"NaN"});
}

TEST(LayerBadInput, InputOfTheWrongHiddenSize) {
  TestRng rng;
  MoeCase c = random_moe_case("olmoe", rng, {.tokens = 3});
  c.x = rng.normal_tensor({3, c.x.size(1) + 1});
  TempDir dir;
  write_case(dir.path(), c);
  expect_user_error(run_moe(dir, layer_args(dir)), {});
}

TEST(LayerBadInput, TruncatedWeights) {
  TestRng rng;
  const MoeCase c = random_moe_case("deepseek_v3", rng, {.tokens = 4});
  TempDir dir;
  write_case(dir.path(), c);
  const fs::path weights = dir / "weights.safetensors";
  const uintmax_t size = fs::file_size(weights);
  for (const uintmax_t cut : {size / 2, uintmax_t{12}}) {  // inside the data, inside the header
    SCOPED_TRACE(fmt::format("cut to {} of {} bytes", cut, size));
    fs::resize_file(weights, cut);
    expect_user_error(run_moe(dir, layer_args(dir)), {"truncated", "weights.safetensors"});
  }
}

TEST(LayerBadInput, MissingFiles) {
  TestRng rng;
  const MoeCase c = random_moe_case("qwen2_moe", rng, {.tokens = 4});
  TempDir dir;
  write_case(dir.path(), c);
  for (const char* option : {"--input", "--weights", "--config"}) {
    SCOPED_TRACE(option);
    std::vector<std::string> args = layer_args(dir);
    set_option(args, option, (dir / "absent.file").string());
    expect_user_error(run_moe(dir, args), {"absent.file"});
  }
}

TEST(LayerBadInput, BadOptionValues) {
  TestRng rng;
  const MoeCase c = random_moe_case("qwen3_moe", rng, {.tokens = 4});
  TempDir dir;
  write_case(dir.path(), c);
  expect_user_error(run_moe(dir, layer_args(dir, {"--paradigm", "sideways"})), {"sideways", "paradigm"});
  expect_user_error(run_moe(dir, layer_args(dir, {"--paradigm", "padded", "--overflow", "spill"})),
                    {"spill", "overflow"});
  expect_user_error(run_moe(dir, layer_args(dir, {"--paradigm", "padded", "--capacity-factor", "-1"})),
                    {"capacity"});
}

// A malformed thread-pool setting in the environment is an error naming it, not a silent default.
TEST(LayerBadInput, BadPoolSettingsAreNamed) {
  TestRng rng;
  const MoeCase c = random_moe_case("mixtral", rng, {.tokens = 4});
  TempDir dir;
  write_case(dir.path(), c);
  for (const char* var : {"MOE_POOL_SPIN_US", "MOE_NUM_THREADS"}) {
    for (const char* value : {"abc", "-5", "12us", "0x10"}) {
      SCOPED_TRACE(std::string(var) + "=" + value);
      const ScopedEnv setting(var, value);
      expect_user_error(run_moe(dir, layer_args(dir)), {var});
    }
  }
  const ScopedEnv no_threads("MOE_NUM_THREADS", "0");
  expect_user_error(run_moe(dir, layer_args(dir)), {"MOE_NUM_THREADS", "1 to 4096"});
}

// ---- the fast CPU experts (the default) ----------------------------------------------------------------

// ||got - want||_2 / ||want||_2 over hidden_states [T, H] F32; NaN never passes.
double l2_error(const Tensor& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = double{got.data_as<float>()[i]} - want[i];
    diff += std::isnan(d) ? INFINITY : d * d;
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// Without --cpu-experts the experts follow the checkpoint: F32 and F16 weights get the exact experts (the
// oracle's 1e-5), BF16 weights the fast bf16 experts (within 1e-2, and measurably not exact).
TEST(LayerDefaults, ExpertsFollowTheCheckpointDtype) {
  TestRng rng;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const MoeCase c = random_moe_case("deepseek_v3", rng, {.weight_dtype = dtype, .tokens = 16});
    TempDir dir;
    write_case(dir.path(), c);
    std::vector<std::string> args = layer_args(dir);
    const auto option = std::find(args.begin(), args.end(), "--cpu-experts");
    ASSERT_TRUE(option != args.end());
    args.erase(option, option + 2);
    const RunResult run = run_moe(dir, args);
    EXPECT_SUCCESS(run);
    if (run.exit_code != 0) continue;
    const ReferenceResult ref = reference(c);
    const Tensor hidden = SafetensorsFile::open(dir / "y.safetensors").get("hidden_states");
    const double error = l2_error(hidden, ref.out);
    if (dtype == DType::BF16) {
      EXPECT_LE(error, 1e-2);
      EXPECT_GT(error, 1e-6);
    } else {
      EXPECT_LE(error, kTolerance);
    }
  }
}

// `moe layer --cpu-experts fast` runs the fast experts: bf16 within 1e-2 of the oracle (normwise), int8
// within 4e-2, routing unchanged; --cpu-weights int8 with the reference experts is refused.
TEST(LayerFastExperts, DefaultBf16AndInt8MatchTheOracle) {
  TestRng rng;
  for (const std::string& type : model_types())
    for (const char* weights : {"bf16", "int8"}) {
      SCOPED_TRACE(type + " " + weights);
      const MoeCase c = random_moe_case(type, rng, {.weight_dtype = DType::BF16, .tokens = 16});
      TempDir dir;
      write_case(dir.path(), c);
      std::vector<std::string> args = layer_args(dir, {"--cpu-weights", weights});
      set_option(args, "--cpu-experts", "fast");
      const RunResult run = run_moe(dir, args);
      EXPECT_SUCCESS(run);
      if (run.exit_code != 0) continue;
      const ReferenceResult ref = reference(c);
      const Tensor hidden = SafetensorsFile::open(dir / "y.safetensors").get("hidden_states");
      EXPECT_LE(l2_error(hidden, ref.out), std::string(weights) == "bf16" ? 1e-2 : 4e-2);
    }
  TestRng rng2;
  const MoeCase c = random_moe_case("qwen3_moe", rng2, {.tokens = 4});
  TempDir dir;
  write_case(dir.path(), c);
  expect_user_error(run_moe(dir, layer_args(dir, {"--cpu-weights", "int8"})), {"int8", "fast"});
}

}  // namespace
}  // namespace moe::test
