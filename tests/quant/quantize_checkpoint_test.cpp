// moe quantize's library: every fixture model (tests/data/models) quantised to fp8 and int4, written, loaded
// back and run; what is carried over unchanged; the gate option; the refusals and the atomic write.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <tuple>

#include "moe/core/checkpoint.h"
#include "engine/quantize_checkpoint.h"
#include "ep/memory_plan.h"
#include "moe/model/causal_lm.h"
#include "moe/quant/fp8_block.h"
#include "temp_dir.h"

namespace moe::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kFamilies[] = {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3"};

fs::path fixture(const std::string& family) {
  const char* data = std::getenv("MOE_TEST_DATA");  // overrides the source tree's path (a build elsewhere)
  return fs::path(data && *data ? data : MOE_TEST_DATA) / "models" / family;
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

QuantizeOptions options(const fs::path& model, const fs::path& out, quant::QuantMethod method) {
  QuantizeOptions o;
  o.model = model;
  o.out = out;
  o.scheme.method = method;
  o.scheme.group_size = 16;  // divides every fixture's expert sizes (64, 32, Qwen2's shared 48)
  o.calibration = {"The quick brown fox jumps over the lazy dog.", "1, 2, 3, 4, 5, 6"};
  return o;
}

// Logits of a few tokens through the model in `dir` (CPU, reference experts).
std::vector<float> logits(const fs::path& dir) {
  const auto lm = model::CausalLM::load(dir);
  const auto cache = lm->new_cache(1, 16);
  const std::vector<std::vector<int32_t>> ids{{1, 5, 9, 17, 33, 65, 129, 7}};
  const Tensor out = lm->forward(ids, *cache, false);
  return {out.data_as<float>(), out.data_as<float>() + out.numel()};
}

double normwise(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) diff += (got[i] - want[i]) * (got[i] - want[i]), norm += want[i] * want[i];
  return std::sqrt(diff / norm);
}

// Routed and shared experts (Qwen2's shared_expert., not its shared_expert_gate).
bool is_expert(const std::string& name) {
  return name.find("experts.") != std::string::npos || name.find("shared_expert.") != std::string::npos;
}

void round_trip(const std::string& family, quant::QuantMethod method, double max_weight_error) {
  SCOPED_TRACE(family + " " + std::string(quant::quant_method_name(method)));
  test::TempDir dir;
  const fs::path out = dir / "out";
  const QuantizeReport r = quantize_checkpoint(options(fixture(family), out, method));

  // The config says what was done; the tokenizer and the other files came along.
  const json config = read_json(out / "config.json");
  EXPECT_EQ(quant::parse_quant_scheme(config).method, method);
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));  // the source's single file is not copied over the shards

  // Experts stored quantised, everything else byte for byte as in the source.
  const Checkpoint source = Checkpoint::open(fixture(family)), written = Checkpoint::open(out);
  int64_t expert_weights = 0;
  for (const std::string& name : source.names()) {
    const Tensor s = source.get(name);
    if (is_expert(name) && name.ends_with(".weight")) {
      ++expert_weights;
      if (method == quant::QuantMethod::fp8_block) {
        EXPECT_EQ(written.get(name).dtype(), DType::F8_E4M3) << name;
        EXPECT_EQ(written.get(name + "_scale_inv").dtype(), DType::F32) << name;
      } else {
        const std::string module = name.substr(0, name.size() - 7);
        EXPECT_FALSE(written.contains(name)) << name;
        EXPECT_EQ(written.get(module + ".qweight").dtype(), DType::I32) << name;
        EXPECT_EQ(written.get(module + ".scales").dtype(), DType::F16) << name;
      }
      continue;
    }
    const Tensor w = written.get(name);
    ASSERT_EQ(w.dtype(), s.dtype()) << name;
    ASSERT_EQ(w.shape(), s.shape()) << name;
    EXPECT_EQ(0, std::memcmp(w.data(), s.data(), s.nbytes())) << name;
  }
  EXPECT_EQ(r.quantized_tensors, expert_weights);

  // One error per expert (and shared expert) of every MoE layer, each small but not zero.
  const auto moe = parse_moe_config(read_json(fixture(family) / "config.json"));
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < moe.num_hidden_layers; ++l) moe_layers += is_moe_layer(moe, l) ? 1 : 0;
  const int64_t per_layer = moe.router.n_experts + (moe.shared != SharedExpertKind::none ? 1 : 0);
  EXPECT_EQ(static_cast<int64_t>(r.errors.size()), moe_layers * per_layer);
  for (const ExpertError& e : r.errors) {
    EXPECT_GT(e.rel_error, 0) << e.layer << "/" << e.expert;
    EXPECT_LT(e.rel_error, max_weight_error) << e.layer << "/" << e.expert;
  }

  // The calibration saw every token in every MoE layer; rates are shares.
  ASSERT_EQ(static_cast<int64_t>(r.routing.size()), moe_layers);
  for (const LayerRouting& l : r.routing) EXPECT_EQ(l.decisions, r.calibration_tokens);
  EXPECT_EQ(r.greedy_positions, r.calibration_tokens);
  EXPECT_GT(r.calibration_tokens, 4);
  EXPECT_GE(r.flip_rate(), 0.0);
  EXPECT_LE(r.flip_rate(), 1.0);
  EXPECT_LT(r.flip_rate_gate_kept(), 0);  // the gate was not quantised

  // Loaded back, the model runs close to the original (random-weight fixtures: errors are not averaged away).
  const std::vector<float> want = logits(fixture(family)), got = logits(out);
  const double error = normwise(got, want);
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 0.5);

  // The fp8 experts as stored agree with moe plan --dtype fp8 (its blocks are whole 128x128 ones; the
  // fixtures' matrices are smaller than one block, hence not exactly).
  if (method == quant::QuantMethod::fp8_block) {
    const ep::PlanRequest request{.n_ranks = 1, .device_bytes = int64_t{1} << 40, .max_batched_tokens = 1,
                                  .dtype = ep::WeightDType::fp8};
    const int64_t planned =
        ep::plan_memory(config, ep::resolve_placement("", moe.router.n_experts, 1), request).ranks[0].expert_bytes;
    EXPECT_NEAR(static_cast<double>(r.routed_expert_bytes), static_cast<double>(planned), 0.01 * planned);
  }
}

TEST(QuantizeCheckpoint, Fp8RoundTripEveryFixture) {
  for (const char* family : kFamilies) round_trip(family, quant::QuantMethod::fp8_block, 0.05);
}

TEST(QuantizeCheckpoint, Int4RoundTripEveryFixture) {
  for (const char* family : kFamilies) round_trip(family, quant::QuantMethod::awq_int4, 0.15);
}

TEST(QuantizeCheckpoint, QuantizeGateShowsItsShareOfTheFlips) {
  test::TempDir dir;
  QuantizeOptions o = options(fixture("qwen3_moe"), dir / "out", quant::QuantMethod::fp8_block);
  o.quantize_gate = true;
  const QuantizeReport r = quantize_checkpoint(o);
  const Checkpoint written = Checkpoint::open(dir / "out");
  EXPECT_EQ(written.get("model.layers.0.mlp.gate.weight").dtype(), DType::F8_E4M3);
  int64_t gates = 0;
  for (const ExpertError& e : r.errors) gates += e.expert == -2 ? 1 : 0;
  EXPECT_EQ(gates, 2);
  EXPECT_GE(r.flip_rate_gate_kept(), 0.0);
  for (const LayerRouting& l : r.routing) EXPECT_LE(l.flips_gate_kept, l.decisions);
  // The first MoE layer sees the same input in both runs: with the gate kept nothing can flip there.
  EXPECT_EQ(r.routing.front().flips_gate_kept, 0);
  const json report = quantize_report_json(r);
  EXPECT_TRUE(report["calibration"].contains("topk_flip_rate_gate_kept"));
}

std::string error_of(const QuantizeOptions& o) {
  try {
    quantize_checkpoint(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantizeCheckpoint, RefusesAndLeavesNothingHalfWritten) {
  test::TempDir dir;
  // A copy of a fixture, so that an --out inside it can be tried without touching the source tree.
  const fs::path model = dir / "model";
  fs::copy(fixture("olmoe"), model);
  EXPECT_NE(error_of(options(model, model, quant::QuantMethod::fp8_block)).find("the same as"), std::string::npos);
  EXPECT_NE(error_of(options(model, model / "q", quant::QuantMethod::fp8_block)).find("inside"), std::string::npos);
  EXPECT_FALSE(fs::exists(model / "q"));
  EXPECT_NE(error_of(options(model, dir.path(), quant::QuantMethod::fp8_block)).find("contains"), std::string::npos);

  // A size int4 cannot pack: the error names the tensor, and neither the output nor a partial one is left.
  QuantizeOptions bad = options(model, dir / "out", quant::QuantMethod::awq_int4);
  bad.scheme.group_size = 128;
  EXPECT_NE(error_of(bad).find("experts.0."), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "out"));
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string().find(".out.partial"), std::string::npos) << entry.path();

  quantize_checkpoint(options(model, dir / "out", quant::QuantMethod::fp8_block));
  EXPECT_NE(error_of(options(model, dir / "out", quant::QuantMethod::fp8_block)).find("not empty"), std::string::npos);
  EXPECT_NE(error_of(options(dir / "out", dir / "again", quant::QuantMethod::fp8_block)).find("quantised already"),
            std::string::npos);
}

std::string load_error(const fs::path& dir) {
  try {
    model::CausalLM::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantizeCheckpoint, BadScalesAndBlockSizesNameTheTensorAtLoad) {
  test::TempDir dir;
  quantize_checkpoint(options(fixture("olmoe"), dir / "fp8", quant::QuantMethod::fp8_block));
  const Checkpoint good = Checkpoint::open(dir / "fp8");
  const std::string target = "model.layers.1.mlp.experts.5.up_proj.weight_scale_inv";
  // A copy of the written checkpoint with one scale replaced, or with another block size in its config.
  const auto variant = [&](const std::string& name, float scale, const json& block_size) {
    const fs::path d = dir / name;
    fs::create_directories(d);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& n : good.names())
      tensors.emplace_back(n, n == target ? Tensor::from_f32({1, 1}, std::vector<float>{scale}) : good.get(n));
    write_safetensors(d / "model.safetensors", tensors);
    json config = read_json(dir / "fp8" / "config.json");
    config["quantization_config"]["weight_block_size"] = block_size;
    std::ofstream(d / "config.json") << config.dump();
    return d;
  };
  EXPECT_EQ(load_error(variant("ok", 1.0f, {128, 128})), "");
  for (const float bad : {0.0f, NAN, -1.0f}) {
    const std::string e = load_error(variant("bad", bad, {128, 128}));
    EXPECT_NE(e.find("'model.layers.1.mlp.experts.5.up_proj.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("finite and > 0"), std::string::npos) << e;
    fs::remove_all(dir / "bad");
  }
  const std::string blocks = load_error(variant("blocks", 1.0f, {16, 16}));
  EXPECT_NE(blocks.find("weight_block_size"), std::string::npos) << blocks;
  EXPECT_NE(blocks.find("expected [2, 4]"), std::string::npos) << blocks;  // gate_proj [32, 64] of the first layer
}

TEST(QuantizeCheckpoint, Fp8DenseAndAttentionWeightsLoadAsTheirDequantisedValues) {
  // DeepSeek-V3's release stores attention and the dense MLPs in fp8 too. The fixture with every 2-D weight
  // but the embeddings, lm_head and routers in fp8 must run exactly as the float checkpoint holding the
  // dequantised values of those weights.
  test::TempDir dir;
  const Checkpoint source = Checkpoint::open(fixture("deepseek_v3"));
  std::vector<std::pair<std::string, Tensor>> fp8, dequantised;
  int64_t converted = 0;
  for (const std::string& name : source.names()) {
    const Tensor t = source.get(name);
    const bool keep = t.dim() != 2 || !name.ends_with(".weight") || name.find("embed_tokens") != std::string::npos ||
                      name.starts_with("lm_head") || name.ends_with("mlp.gate.weight");
    if (keep) {
      fp8.emplace_back(name, t);
      dequantised.emplace_back(name, t);
      continue;
    }
    const quant::Fp8BlockShape block{.n = 16, .k = 16};
    quant::Fp8BlockWeight q = quant::quantize_fp8_block(t, block);
    dequantised.emplace_back(name, quant::dequantize_fp8_block(q.values, q.scale_inv, block, DType::BF16, name));
    fp8.emplace_back(name, std::move(q.values));
    fp8.emplace_back(name + "_scale_inv", std::move(q.scale_inv));
    ++converted;
  }
  EXPECT_GT(converted, 3 * 16 * 2);  // experts, and attention and the dense MLP of layer 0 besides
  json config = read_json(fixture("deepseek_v3") / "config.json");
  for (const auto& [name, tensors, quantised] : {std::tuple{"fp8", &fp8, true}, std::tuple{"bf16", &dequantised, false}}) {
    fs::create_directories(dir / name);
    write_safetensors(dir / name / "model.safetensors", *tensors);
    json c = config;
    if (quantised) c["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}};
    std::ofstream(dir / name / "config.json") << c.dump();
  }
  EXPECT_EQ(logits(dir / "fp8"), logits(dir / "bf16"));
}

TEST(QuantizeCheckpoint, FusedExpertsAreWrittenPerExpert) {
  // The qwen3_moe fixture with its experts fused as transformers 5 keeps them in memory.
  test::TempDir dir;
  const fs::path fused = dir / "fused";
  fs::create_directories(fused);
  for (const char* file : {"config.json", "tokenizer.json", "generation_config.json"})
    fs::copy_file(fixture("qwen3_moe") / file, fused / file);
  const Checkpoint source = Checkpoint::open(fixture("qwen3_moe"));
  const auto moe = parse_moe_config(read_json(fused / "config.json"));
  const int64_t E = moe.router.n_experts, I = moe.expert_intermediate_size, H = moe.hidden_size;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : source.names())
    if (!is_expert(name)) tensors.emplace_back(name, source.get(name));
  for (int64_t l = 0; l < moe.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.mlp.experts.", l);
    const DType dtype = source.get(p + "0.gate_proj.weight").dtype();
    Tensor gate_up = Tensor::empty(dtype, {E, 2 * I, H}), down = Tensor::empty(dtype, {E, H, I});
    const size_t block = static_cast<size_t>(I * H) * dtype_size(dtype);
    for (int64_t e = 0; e < E; ++e) {
      char* gu = static_cast<char*>(gate_up.data()) + 2 * e * block;
      std::memcpy(gu, source.get(fmt::format("{}{}.gate_proj.weight", p, e)).data(), block);
      std::memcpy(gu + block, source.get(fmt::format("{}{}.up_proj.weight", p, e)).data(), block);
      std::memcpy(static_cast<char*>(down.data()) + e * block, source.get(fmt::format("{}{}.down_proj.weight", p, e)).data(),
                  block);
    }
    tensors.emplace_back(p + "gate_up_proj", gate_up);
    tensors.emplace_back(p + "down_proj", down);
  }
  write_safetensors(fused / "model.safetensors", tensors);

  quantize_checkpoint(options(fused, dir / "from_fused", quant::QuantMethod::fp8_block));
  quantize_checkpoint(options(fixture("qwen3_moe"), dir / "from_split", quant::QuantMethod::fp8_block));
  const Checkpoint a = Checkpoint::open(dir / "from_fused"), b = Checkpoint::open(dir / "from_split");
  EXPECT_EQ(a.names(), b.names());
  for (const std::string& name : b.names())
    EXPECT_EQ(0, std::memcmp(a.get(name).data(), b.get(name).data(), b.get(name).nbytes())) << name;
}

}  // namespace
}  // namespace moe::engine
