// The model runner on FP8 checkpoints as transformers writes them (CPU, reference experts, the weights
// dequantised at load: bf16(float(e4m3) x the scale of its block)).
//
// CausalLmFp8Checkpoint (always runs): the deepseek_v3 fixture rewritten in transformers 5's FP8 layout
// (every linear but lm_head and the router in F8_E4M3 with "*.weight_scale_inv", the routed experts fused
// into gate_up_proj [E, 2I, H] / down_proj [E, H, I] with "*_scale_inv") gives the same logits and routing,
// bit for bit, as a plain bf16 checkpoint of the same weights dequantised here by hand.
//
// CausalLmFp8Fixture: tests/data/models/deepseek_v3_fp8, a checkpoint transformers itself quantised
// (FineGrainedFP8Config, 128 x 128 blocks) and saved (scripts/device/make_fixtures.py, build_fp8; made on a
// GPU by `scripts/device/run.sh fp8_fixture`). Skipped while absent. Against its reference:
//   - prefill logits against transformers' fp32 CPU run of the same dequantised weights
//     (logits_dequantized.*): normwise <= 1e-4 per row, as every float family's fixture test;
//   - against transformers' FP8 run on CUDA (W8A8: activations quantised per token and 128 columns,
//     logits.*): every logit within fp8.logit_tolerance (twice the largest deviation measured between the
//     two transformers runs);
//   - routing as the dequantised run's (cases[].dequantized.routing);
//   - greedy tokens as the dequantised run's (cases[].dequantized.generated_ids) for as long as the FP8
//     run's step margins (generated_margins) exceed the tolerance; how many of the FP8 run's own tokens
//     (generated_ids) we match is printed.
#include "moe/model/causal_lm.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "core/float_convert.h"
#include "model_fixture.h"
#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"
#include "moe/quant/fp8_block.h"
#include "moe/quant/quant_scheme.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using model::CausalLM;
using model::RoutingEvent;
using nlohmann::json;

constexpr double kLogitTolerance = 1e-4;  // normwise per row: the float families' bound
constexpr char kFixture[] = "deepseek_v3_fp8";

json read_json(const fs::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

// ---- transformers 5's FP8 layout, written here from the float deepseek_v3 fixture ----

// bf16(float(e4m3) x scale of its block) of values [..., N, K] with scales [..., ceil(N / n), ceil(K / k)],
// computed without the library's dequantiser.
Tensor dequantize_by_hand(const Tensor& values, const Tensor& scales, quant::Fp8BlockShape block) {
  const int64_t N = values.size(-2), K = values.size(-1), nb = scales.size(-2), kb = scales.size(-1);
  const int64_t matrices = values.numel() / (N * K);
  Tensor out = Tensor::empty(DType::BF16, values.shape());
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = (m * N + n) * K + k;
        const float s = scales.data_as<float>()[(m * nb + n / block.n) * kb + k / block.k];
        out.data_as<uint16_t>()[i] = f32_to_bf16(fp8_e4m3_to_f32(values.data_as<uint8_t>()[i]) * s);
      }
  return out;
}

struct Fp8Pair {
  fs::path fp8;          // config.json with an fp8 quantization_config, model.safetensors in F8_E4M3
  fs::path dequantized;  // the same names, the fp8 weights as bf16, no quantization_config
  int64_t fp8_tensors = 0;
};

// The float fixture `family` (DeepSeek-V3 names) as transformers 5 saves it under FineGrainedFP8Config:
// F8_E4M3 weights of every attention projection, dense MLP, shared expert and routed expert (these fused per
// layer), "_scale_inv" F32 block scales; lm_head, the embedding, the norms and the router as stored.
Fp8Pair write_fp8_pair(const fs::path& root, const std::string& family, quant::Fp8BlockShape block) {
  const fs::path src = fixture_dir(family);
  const Checkpoint float_ckpt = Checkpoint::open(src);
  const json config = read_json(src / "config.json");
  const int64_t E = config.at("n_routed_experts"), I = config.at("moe_intermediate_size"),
                H = config.at("hidden_size");
  static const std::regex routed(R"((model\.layers\.\d+\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight)");
  static const std::regex linear(
      R"(.*\.(q_a_proj|q_b_proj|q_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj|gate_proj|up_proj|down_proj)\.weight)");
  std::vector<std::pair<std::string, Tensor>> fp8, dequantized;
  std::map<std::string, std::pair<Tensor, Tensor>> fused;  // "<layer>.mlp.experts." -> gate_up, down (F32)
  Fp8Pair pair{.fp8 = root / "fp8", .dequantized = root / "dequantized"};
  const auto add_fp8 = [&](const std::string& name, const std::string& scale_name, const Tensor& w) {
    const quant::Fp8BlockWeight q = quant::quantize_fp8_block(w, block);
    fp8.emplace_back(name, q.values);
    fp8.emplace_back(scale_name, q.scale_inv);
    dequantized.emplace_back(name, dequantize_by_hand(q.values, q.scale_inv, block));
    ++pair.fp8_tensors;
  };
  for (const std::string& name : float_ckpt.names()) {
    const Tensor t = float_ckpt.get(name);
    std::smatch m;
    if (std::regex_match(name, m, routed)) {
      auto& [gate_up, down] = fused[m[1].str()];
      if (!gate_up.defined()) {
        gate_up = Tensor::empty(DType::F32, {E, 2 * I, H});  // gate rows, then up rows, of each expert
        down = Tensor::empty(DType::F32, {E, H, I});
      }
      const int64_t e = std::stoll(m[2]);
      const Tensor w = t.to_f32();
      float* dst = m[3] == "down" ? down.data_as<float>() + e * H * I
                                  : gate_up.data_as<float>() + (e * 2 + (m[3] == "up" ? 1 : 0)) * I * H;
      std::copy_n(w.data_as<float>(), w.numel(), dst);
    } else if (std::regex_match(name, linear)) {
      add_fp8(name, name + "_scale_inv", t);
    } else {
      fp8.emplace_back(name, t);
      dequantized.emplace_back(name, t);
    }
  }
  for (const auto& [prefix, tensors] : fused) {
    add_fp8(prefix + "gate_up_proj", prefix + "gate_up_proj_scale_inv", tensors.first);
    add_fp8(prefix + "down_proj", prefix + "down_proj_scale_inv", tensors.second);
  }
  json fp8_config = config;
  fp8_config["quantization_config"] = {{"quant_method", "fp8"},
                                       {"activation_scheme", "dynamic"},
                                       {"weight_block_size", {block.n, block.k}},
                                       {"modules_to_not_convert", nullptr}};
  const auto write_dir = [](const fs::path& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                            const json& cfg) {
    fs::create_directories(dir);
    write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
    std::ofstream(dir / "config.json") << cfg.dump(1);
  };
  write_dir(pair.fp8, fp8, fp8_config);
  write_dir(pair.dequantized, dequantized, config);
  return pair;
}

// NOTE: 32 x 32 blocks, not transformers' 128: the fixture's matrices (64 x 32 and the like) then hold
// several blocks each, partial ones included (q_b_proj's 48 columns), so a block indexed wrongly shows.
TEST(CausalLmFp8Checkpoint, TransformersLayoutRunsAsItsDequantisedWeights) {
  TempDir dir;
  const Fp8Pair pair = write_fp8_pair(dir.path(), "deepseek_v3", {.n = 32, .k = 32});
  const auto fp8 = CausalLM::load(pair.fp8), plain = CausalLM::load(pair.dequantized);
  const Fixture fixture = load_fixture("deepseek_v3");
  for (const FixtureCase& c : fixture.cases) {
    SCOPED_TRACE("prompt: " + c.text);
    const Prefill a = prefill(*fp8, c.ids), b = prefill(*plain, c.ids);
    ASSERT_EQ(a.logits.shape(), b.logits.shape());
    EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.nbytes()));
    ASSERT_EQ(a.routing.size(), b.routing.size());
    for (const auto& [layer, events] : b.routing) {
      ASSERT_EQ(a.routing.at(layer).size(), events.size()) << "layer " << layer;
      for (size_t t = 0; t < events.size(); ++t) {
        EXPECT_EQ(a.routing.at(layer)[t].experts, events[t].experts) << "layer " << layer << " token " << t;
        EXPECT_EQ(a.routing.at(layer)[t].weights, events[t].weights) << "layer " << layer << " token " << t;
      }
    }
  }
  std::printf(
      "[ deepseek_v3 in transformers' fp8 layout ] %lld fp8 tensors; logits and routing identical to "
      "the hand-dequantised bf16 checkpoint\n",
      static_cast<long long>(pair.fp8_tensors));
}

// ---- the fixture transformers made ----

struct Fp8Case {
  std::vector<int32_t> dequantized_generated;
  std::vector<double> generated_margins;  // the FP8 run's top-1 minus top-2 logit per step
  std::map<int64_t, FixtureRouting> dequantized_routing;
  Tensor logits_dequantized;  // [logit_positions, V] F32
};

class CausalLmFp8Fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = fixture_dir(kFixture);
    if (!fs::exists(dir / "reference.json"))
      GTEST_SKIP() << dir.string()
                   << " is absent: make it on a GPU with `bash scripts/device/run.sh fp8_fixture` "
                   << "and unpack its deepseek_v3_fp8.tar.xz into tests/data/models/";
    fixture_ = load_fixture(kFixture);
    ref_ = read_json(dir / "reference.json");
    logit_tolerance_ = ref_.at("fp8").at("logit_tolerance").get<double>();
    const SafetensorsFile tensors = SafetensorsFile::open(dir / "reference.safetensors");
    for (size_t p = 0; p < fixture_.cases.size(); ++p) {
      const json& c = ref_.at("cases")[p];
      const json& d = c.at("dequantized");
      Fp8Case fc{.dequantized_generated = d.at("generated_ids").get<std::vector<int32_t>>(),
                 .generated_margins = c.at("generated_margins").get<std::vector<double>>(),
                 .dequantized_routing = {},
                 .logits_dequantized = tensors.get("logits_dequantized." + std::to_string(p)).to_f32()};
      for (const auto& [layer, r] : d.at("routing").items())
        fc.dequantized_routing[std::stoll(layer)] = {
            .experts = r.at("experts").get<std::vector<std::vector<int32_t>>>(),
            .weights = r.at("weights").get<std::vector<std::vector<float>>>()};
      cases_.push_back(std::move(fc));
    }
    lm_ = CausalLM::load(fixture_.dir);
  }

  Fixture fixture_;
  json ref_;
  double logit_tolerance_ = 0;
  std::vector<Fp8Case> cases_;
  std::unique_ptr<CausalLM> lm_;
};

// What transformers wrote: an fp8 quantization_config with 128 x 128 blocks, F8_E4M3 weights each with its
// F32 scales. Prints the expert layout it chose (fused or per expert) and the scales' spelling.
TEST_F(CausalLmFp8Fixture, IsTransformersFp8Checkpoint) {
  const quant::QuantScheme scheme = quant::parse_quant_scheme(read_json(fixture_.dir / "config.json"));
  EXPECT_EQ(scheme.method, quant::QuantMethod::fp8_block);
  EXPECT_EQ(scheme.fp8_block.n, 128);
  EXPECT_EQ(scheme.fp8_block.k, 128);
  const Checkpoint c = Checkpoint::open(fixture_.dir);
  const std::vector<std::string> names = c.names();
  const std::set<std::string> all(names.begin(), names.end());
  int64_t fp8 = 0;
  std::string experts = "per expert (experts.{e}.*_proj.weight)";
  for (const std::string& name : names) {
    if (c.get(name).dtype() != DType::F8_E4M3) continue;
    ++fp8;
    const bool weight = name.ends_with(".weight");
    const std::string scale =
        weight ? name + "_scale_inv"
               : (all.contains(name + "_scales_inv") ? name + "_scales_inv" : name + "_scale_inv");
    ASSERT_TRUE(all.contains(scale)) << name << " has no scales '" << scale << "'";
    EXPECT_EQ(c.get(scale).dtype(), DType::F32) << scale;
    if (!weight)
      experts =
          "fused (" + name.substr(name.rfind('.') + 1) + " with " + scale.substr(scale.rfind('.') + 1) + ")";
  }
  EXPECT_GT(fp8, 0) << "no F8_E4M3 tensor in " << fixture_.dir.string();
  EXPECT_FALSE(all.contains("lm_head.weight") && c.get("lm_head.weight").dtype() == DType::F8_E4M3);
  std::printf("[ %s ] %lld F8_E4M3 tensors; routed experts stored %s; transformers %s\n", kFixture,
              static_cast<long long>(fp8), experts.c_str(),
              ref_.at("versions").at("transformers").get<std::string>().c_str());
}

// (a) and (b): the prefill logits of the last prompt positions.
TEST_F(CausalLmFp8Fixture, PrefillLogitsMatchTheDequantisedRunAndTheFp8RunsTolerance) {
  double worst_rel = 0, worst_abs = 0;
  for (size_t p = 0; p < fixture_.cases.size(); ++p) {
    const FixtureCase& c = fixture_.cases[p];
    SCOPED_TRACE("prompt: " + c.text);
    const Prefill ours = prefill(*lm_, c.ids);
    const int64_t n = static_cast<int64_t>(c.ids.size()), V = lm_->info().vocab_size;
    const Tensor& deq = cases_[p].logits_dequantized;
    ASSERT_EQ(ours.logits.size(1), V);
    ASSERT_EQ(deq.shape(), c.logits.shape());
    for (int64_t r = 0; r < deq.size(0); ++r) {
      const float* row = ours.logits.data_as<float>() + (n - deq.size(0) + r) * V;
      const double rel = row_rel_error(row, deq.data_as<float>() + r * V, V);
      EXPECT_LE(rel, kLogitTolerance) << "row " << r << ": against transformers on the dequantised weights";
      worst_rel = std::max(worst_rel, rel);
      double abs = 0;
      for (int64_t v = 0; v < V; ++v)
        abs = std::max(abs, std::fabs(double{row[v]} - c.logits.data_as<float>()[r * V + v]));
      EXPECT_LE(abs, logit_tolerance_) << "row " << r << ": against transformers' FP8 run";
      worst_abs = std::max(worst_abs, abs);
    }
  }
  std::printf(
      "[ %s ] logits: normwise %.2e against the dequantised run (tolerance %.0e); max |diff| %.3e "
      "against the FP8 run (tolerance %.3e)\n",
      kFixture, worst_rel, kLogitTolerance, worst_abs, logit_tolerance_);
}

TEST_F(CausalLmFp8Fixture, RoutingMatchesTheDequantisedRun) {
  for (size_t p = 0; p < fixture_.cases.size(); ++p) {
    const FixtureCase& c = fixture_.cases[p];
    SCOPED_TRACE("prompt: " + c.text);
    const Prefill ours = prefill(*lm_, c.ids);
    ASSERT_EQ(ours.routing.size(), cases_[p].dequantized_routing.size()) << "MoE layers";
    for (const auto& [layer, ref] : cases_[p].dequantized_routing) {
      ASSERT_TRUE(ours.routing.contains(layer)) << "layer " << layer;
      const auto& events = ours.routing.at(layer);
      ASSERT_EQ(events.size(), ref.experts.size()) << "layer " << layer;
      for (size_t t = 0; t < events.size(); ++t) {
        std::map<int32_t, float> want, got;
        for (size_t j = 0; j < ref.experts[t].size(); ++j) want[ref.experts[t][j]] = ref.weights[t][j];
        for (size_t j = 0; j < events[t].experts.size(); ++j)
          got[events[t].experts[j]] = events[t].weights[j];
        ASSERT_EQ(got.size(), want.size()) << "layer " << layer << " token " << t;
        for (const auto& [expert, weight] : want) {
          ASSERT_TRUE(got.contains(expert))
              << "layer " << layer << " token " << t << ": expert " << expert << " not chosen";
          EXPECT_NEAR(got[expert], weight, 1e-4 * std::max(1.0f, std::fabs(weight)))
              << "layer " << layer << " token " << t << " expert " << expert;
        }
      }
    }
  }
}

// (c): where the FP8 run's margin exceeds the tolerance, the dequantised run picks the FP8 run's token too,
// and so must we; past the first narrower step the runs may part.
TEST_F(CausalLmFp8Fixture, GreedyTokensMatchTheDequantisedRunWhileMarginsHold) {
  std::string report;
  for (size_t p = 0; p < fixture_.cases.size(); ++p) {
    const FixtureCase& c = fixture_.cases[p];
    const Fp8Case& f = cases_[p];
    SCOPED_TRACE("prompt: " + c.text);
    const std::vector<int32_t> ours = greedy(*lm_, c.ids, fixture_.max_new_tokens, fixture_.eos);
    const auto& margins = f.generated_margins;
    const size_t held = static_cast<size_t>(
        std::find_if(margins.begin(), margins.end(), [&](double m) { return m <= logit_tolerance_; }) -
        margins.begin());
    const auto prefix = [&](const std::vector<int32_t>& v) {
      return std::vector<int32_t>(v.begin(),
                                  v.begin() + static_cast<std::ptrdiff_t>(std::min(held, v.size())));
    };
    EXPECT_EQ(prefix(ours), prefix(f.dequantized_generated))
        << "the first " << held << " steps, whose FP8 margins exceed " << logit_tolerance_;
    const auto same_prefix = [&](const std::vector<int32_t>& ref) {
      size_t i = 0;
      while (i < ours.size() && i < ref.size() && ours[i] == ref[i]) ++i;
      return i;
    };
    report += fmt::format("{}{} of {} (margins hold {}; dequantised run {} of {})", p ? ", " : "",
                          same_prefix(c.generated), c.generated.size(), held,
                          same_prefix(f.dequantized_generated), f.dequantized_generated.size());
  }
  std::printf("[ %s ] greedy tokens equal to transformers' FP8 generated_ids from the start: %s\n", kFixture,
              report.c_str());
}

}  // namespace
}  // namespace moe::test
