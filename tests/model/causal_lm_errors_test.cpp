// Bad model directories (copies of a fixture, broken one way each) give a moe::Error that names the
// problem; the old and new config key forms load the same model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>

#include "model_fixture.h"
#include "moe/core/checkpoint.h"
#include "moe/core/check.h"
#include "moe/model/causal_lm.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using model::CausalLM;
using nlohmann::json;

// A copy of fixture `family` in dir/model.
fs::path copy_fixture(const TempDir& dir, const std::string& family) {
  const fs::path to = dir / "model";
  fs::copy(fixture_dir(family), to, fs::copy_options::recursive);
  return to;
}

void edit_config(const fs::path& model, const std::function<void(json&)>& edit) {
  json config;
  {
    std::ifstream in(model / "config.json");
    config = json::parse(in);
  }
  edit(config);
  std::ofstream(model / "config.json") << config.dump(1);
}

// The error message of loading `model`, or "" when it loads.
std::string load_error(const fs::path& model) {
  try {
    CausalLM::load(model);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MENTIONS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

TEST(ModelDirectory, MissingConfig) {
  TempDir dir;
  const fs::path model = copy_fixture(dir, "mixtral");
  fs::remove(model / "config.json");
  EXPECT_MENTIONS(load_error(model), "config.json");
}

TEST(ModelDirectory, MissingWeights) {
  TempDir dir;
  const fs::path model = copy_fixture(dir, "mixtral");
  fs::remove(model / "model.safetensors");  // reference.safetensors stays: it must not be taken for the weights
  EXPECT_MENTIONS(load_error(model), "model.safetensors");
}

TEST(ModelDirectory, MissingShard) {
  TempDir dir;
  const fs::path model = copy_fixture(dir, "deepseek_v3");
  fs::remove(model / "model-00002-of-00004.safetensors");
  EXPECT_MENTIONS(load_error(model), "model-00002-of-00004.safetensors");
}

TEST(ModelDirectory, MissingTensor) {
  TempDir dir;
  const fs::path model = copy_fixture(dir, "olmoe");
  const std::string dropped = "model.layers.1.self_attn.k_norm.weight";
  {
    const Checkpoint original = Checkpoint::open(fixture_dir("olmoe"));
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : original.names())
      if (name != dropped) tensors.emplace_back(name, original.get(name));
    fs::remove(model / "model.safetensors");
    write_sharded_checkpoint(model, tensors, 1u << 30);
  }
  const std::string error = load_error(model);
  EXPECT_MENTIONS(error, dropped);
}

TEST(ModelDirectory, ShapeDisagreeingWithTheConfig) {
  TempDir dir;
  const fs::path model = copy_fixture(dir, "qwen2_moe");
  edit_config(model, [](json& c) { c["intermediate_size"] = 80; });  // the dense layer 1 has 96
  const std::string error = load_error(model);
  EXPECT_MENTIONS(error, "model.layers.1.mlp.gate_proj.weight");
  EXPECT_MENTIONS(error, "[96, 64]");
  EXPECT_MENTIONS(error, "expected [80, 64]");
  EXPECT_MENTIONS(error, "intermediate_size");
}

TEST(ModelDirectory, UnsupportedModelType) {
  TempDir dir;
  const fs::path model = copy_fixture(dir, "mixtral");
  edit_config(model, [](json& c) { c["model_type"] = "llama"; });
  const std::string error = load_error(model);
  EXPECT_MENTIONS(error, "'llama'");
  EXPECT_MENTIONS(error, "deepseek_v3");  // lists the supported ones
}

TEST(ModelDirectory, UnsupportedFeaturesAreNamed) {
  const std::vector<std::tuple<std::string, std::function<void(json&)>, std::string>> cases = {
      {"qwen3_moe", [](json& c) { c["rope_parameters"]["rope_type"] = "dynamic"; }, "rope_type 'dynamic'"},
      {"mixtral", [](json& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.5; }, "partial_rotary_factor"},
      {"deepseek_v2", [](json& c) { c["mlp_bias"] = true; }, "mlp_bias"},
      {"deepseek_v2", [](json& c) { c["num_key_value_heads"] = 2; }, "num_key_value_heads"},
      {"olmoe", [](json& c) { c["hidden_act"] = "gelu"; }, "hidden_act 'gelu'"},
  };
  for (const auto& [family, edit, expected] : cases) {
    TempDir dir;
    const fs::path model = copy_fixture(dir, family);
    edit_config(model, edit);
    EXPECT_MENTIONS(load_error(model), expected);
  }
}

TEST(ModelDirectory, SlidingWindowIsRefusedWhereItWouldBite) {
  TempDir dir;
  const fs::path model = copy_fixture(dir, "mixtral");
  edit_config(model, [](json& c) { c["sliding_window"] = 16; });
  const auto lm = CausalLM::load(model);
  EXPECT_NO_THROW(lm->new_cache(2, 16));
  try {
    lm->new_cache(1, 17);
    ADD_FAILURE() << "a cache longer than the sliding window was accepted";
  } catch (const Error& e) {
    EXPECT_MENTIONS(std::string(e.what()), "sliding_window 16");
  }
}

// transformers 4.x wrote rope_theta + rope_scaling and qwen3_moe's num_experts; 5.x writes
// rope_parameters and num_local_experts. Both load to the same model.
TEST(ModelDirectory, OldAndNewConfigKeysGiveTheSameModel) {
  for (const std::string family : {"deepseek_v3", "qwen3_moe"}) {
    TempDir dir;
    const fs::path model = copy_fixture(dir, family);
    edit_config(model, [](json& c) {
      json rope = c["rope_parameters"];
      c.erase("rope_parameters");
      c["rope_theta"] = rope["rope_theta"];
      rope.erase("rope_theta");
      rope.erase("rope_type");
      if (rope.contains("type")) c["rope_scaling"] = rope;  // {"type": "yarn", "factor": ...}
      if (c.contains("num_local_experts")) {
        c["num_experts"] = c["num_local_experts"];
        c.erase("num_local_experts");
      }
    });
    const Fixture fixture = load_fixture(family);
    const auto old_keys = CausalLM::load(model);
    const auto new_keys = CausalLM::load(fixture.dir);
    const std::vector<std::vector<int32_t>> prompt = {fixture.cases[0].ids};
    auto cache_old = old_keys->new_cache(1, 64), cache_new = new_keys->new_cache(1, 64);
    const Tensor a = old_keys->forward(prompt, *cache_old, true), b = new_keys->forward(prompt, *cache_new, true);
    EXPECT_EQ(row_rel_error(a.data_as<float>(), b.data_as<float>(), a.numel()), 0.0) << family;
  }
}

// OLMoE's clip_qkv clamps q, k and v after the projections: a bound above every value changes nothing, a
// small one changes the logits.
TEST(ModelDirectory, ClipQkvClampsTheProjections) {
  const Fixture fixture = load_fixture("olmoe");
  const std::vector<std::vector<int32_t>> prompt = {fixture.cases[0].ids};
  auto logits = [&](double clip) {
    TempDir dir;
    const fs::path model = copy_fixture(dir, "olmoe");
    edit_config(model, [&](json& c) { c["clip_qkv"] = clip; });
    const auto lm = CausalLM::load(model);
    auto cache = lm->new_cache(1, 64);
    return lm->forward(prompt, *cache, true);
  };
  const auto plain = CausalLM::load(fixture.dir);
  auto cache = plain->new_cache(1, 64);
  const Tensor reference = plain->forward(prompt, *cache, true);
  const Tensor loose = logits(1e9), tight = logits(0.05);
  EXPECT_EQ(row_rel_error(loose.data_as<float>(), reference.data_as<float>(), reference.numel()), 0.0);
  EXPECT_GT(row_rel_error(tight.data_as<float>(), reference.data_as<float>(), reference.numel()), 1e-3);
}

TEST(ModelForward, BadInputsAreErrors) {
  const auto lm = CausalLM::load(fixture_dir("qwen3_moe"));
  const auto other = CausalLM::load(fixture_dir("qwen3_moe"));
  auto cache = lm->new_cache(1, 4);
  const std::vector<std::vector<int32_t>> out_of_vocab = {{1, 2048}};
  EXPECT_THROW(lm->forward(out_of_vocab, *cache, true), Error);
  const std::vector<std::vector<int32_t>> too_long = {{1, 2, 3, 4, 5}};
  EXPECT_THROW(lm->forward(too_long, *cache, true), Error);
  const std::vector<std::vector<int32_t>> two = {{1}, {2}};
  EXPECT_THROW(lm->forward(two, *cache, true), Error);  // one sequence in the cache
  auto foreign = other->new_cache(1, 4);
  const std::vector<std::vector<int32_t>> one = {{1}};
  EXPECT_THROW(lm->forward(one, *foreign, true), Error);
  EXPECT_EQ(cache->length(0), 0);
  const Tensor none = lm->forward(std::vector<std::vector<int32_t>>{{}}, *cache, true);
  EXPECT_EQ(none.size(0), 0);
}

}  // namespace
}  // namespace moe::test
