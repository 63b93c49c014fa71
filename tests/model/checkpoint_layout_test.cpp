// checkpoint_layout (the tensors a config's checkpoint holds) against every transformers fixture: the same
// names and shapes as the fixture's file (Mixtral's block_sparse_moe read as mlp.), and a model loaded from a
// generated checkpoint over those names (Checkpoint::generated, fed the fixture's tensors) gives the same
// logits as the model loaded from the directory.
#include "checkpoint_layout.h"

#include <gtest/gtest.h>

#include "decoder_ops.h"
#include "model_fixture.h"

namespace moe::test {
namespace {

std::string without_block_sparse(std::string name) {
  const std::string from = "block_sparse_moe.";
  if (const size_t at = name.find(from); at != std::string::npos) name.replace(at, from.size(), "mlp.");
  return name;
}

class CheckpointLayout : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointLayout, ListsTheFixturesTensors) {
  const std::filesystem::path dir = fixture_dir(GetParam());
  const Checkpoint checkpoint = Checkpoint::open(dir);
  std::map<std::string, std::vector<int64_t>> found;
  for (const std::string& name : checkpoint.names())
    found[without_block_sparse(name)] = checkpoint.get(name).shape();
  const auto layout =
      model::checkpoint_layout(model::load_model_config(dir), model::ExpertTensors::per_expert);
  for (const auto& [name, shape] : layout) {
    const auto it = found.find(name);
    ASSERT_NE(it, found.end()) << name << " is in the layout, not in the fixture";
    EXPECT_EQ(it->second, shape) << name;
  }
  for (const auto& [name, shape] : found)
    EXPECT_TRUE(layout.count(name)) << name << " is missing from the layout";
}

TEST_P(CheckpointLayout, AGeneratedCheckpointLoadsAsTheDirectoryDoes) {
  const std::filesystem::path dir = fixture_dir(GetParam());
  const Checkpoint file = Checkpoint::open(dir);
  const model::ModelConfig config = model::load_model_config(dir);
  int64_t made = 0;
  const auto maker = [&](const std::string& name, const std::vector<int64_t>& shape) {
    ++made;
    const std::string stored = file.contains(name) ? name : [&] {
      std::string n = name;
      n.replace(n.find("mlp."), 4, "block_sparse_moe.");
      return n;
    }();
    Tensor t = file.get(stored);
    EXPECT_EQ(t.shape(), shape) << name;
    return t;
  };
  const Checkpoint generated = Checkpoint::generated(
      "fixture " + GetParam(), model::checkpoint_layout(config, model::ExpertTensors::per_expert), maker);
  EXPECT_EQ(generated.path().string(), "fixture " + GetParam());
  const auto from_dir = model::CausalLM::load(dir);
  const auto from_generated = model::load_causal_lm(config, generated, {}, model::make_cpu_decoder_ops());
  EXPECT_GT(made, 0);
  const std::vector<std::vector<int32_t>> prompt = {{1, 5, 9, 2, 7}};
  auto cache_a = from_dir->new_cache(1, 8), cache_b = from_generated->new_cache(1, 8);
  const Tensor a = from_dir->forward(prompt, *cache_a, true),
               b = from_generated->forward(prompt, *cache_b, true);
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(a.data_as<float>()[i], b.data_as<float>()[i]) << "logit " << i;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CheckpointLayout, ::testing::ValuesIn(fixture_families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moe::test
