#include "moe/core/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"
#include "test_random.h"

namespace moe {
namespace {

using test::TempDir;

namespace fs = std::filesystem;
using json = nlohmann::json;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

void expect_same_bytes(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.nbytes(), want.nbytes());
  if (want.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0);
  }
}

template <class Body>
std::string error_message(Body body) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message spans lines: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a moe::Error";
  return "";
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "\"" << (text) << "\" lacks \"" << (part) << "\""

// A small model's worth of tensors of several dtypes and sizes, in a layer order (not name order).
NamedTensors model_tensors(test::TestRng& rng) {
  NamedTensors tensors;
  tensors.emplace_back("model.embed_tokens.weight", rng.normal_tensor({32, 16}, 1.0f, DType::BF16));
  for (int layer = 0; layer < 3; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    tensors.emplace_back(prefix + "input_layernorm.weight", rng.normal_tensor({16}));
    tensors.emplace_back(prefix + "mlp.gate.weight", rng.normal_tensor({4, 16}, 1.0f, DType::F16));
    tensors.emplace_back(prefix + "mlp.experts.gate_up_proj", rng.normal_tensor({4, 16, 24}, 1.0f, DType::F8_E4M3));
    tensors.emplace_back(prefix + "mlp.experts.down_proj", rng.normal_tensor({4, 12, 16}, 1.0f, DType::BF16));
  }
  Tensor ids = Tensor::empty(DType::I64, {5});
  for (int64_t i = 0; i < 5; ++i) ids.data_as<int64_t>()[i] = i * i - 7;
  tensors.emplace_back("model.vocab_ids", ids);
  tensors.emplace_back("model.empty", Tensor::empty(DType::I32, {0}));
  tensors.emplace_back("lm_head.weight", rng.normal_tensor({32, 16}, 1.0f, DType::BF16));
  return tensors;
}

void expect_checkpoint_holds(const Checkpoint& checkpoint, const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(checkpoint.names(), names);
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(checkpoint.contains(name));
    expect_same_bytes(checkpoint.get(name), tensor);
  }
  EXPECT_FALSE(checkpoint.contains("model.layers.9.mlp.gate.weight"));
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  write_safetensors(dir / "weights.safetensors", tensors);
  const Checkpoint checkpoint = Checkpoint::open(dir / "weights.safetensors");
  EXPECT_EQ(checkpoint.path(), dir / "weights.safetensors");
  expect_checkpoint_holds(checkpoint, tensors);
}

TEST(Checkpoint, DirectoryPrefersModelSafetensors) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  write_safetensors(dir / "model.safetensors", tensors);
  write_safetensors(dir / "other.safetensors", {{"decoy", Tensor::zeros(DType::F32, {1})}});
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.path(), dir.path());
  expect_checkpoint_holds(checkpoint, tensors);
  EXPECT_FALSE(checkpoint.contains("decoy"));
}

TEST(Checkpoint, DirectoryWithOneSafetensorsFile) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  write_safetensors(dir / "consolidated.safetensors", tensors);
  write_text(dir / "config.json", "{}");
  expect_checkpoint_holds(Checkpoint::open(dir.path()), tensors);
}

TEST(Checkpoint, DirectoryWithoutACheckpoint) {
  TempDir dir;
  const std::string empty = error_message([&] { Checkpoint::open(dir.path()); });
  EXPECT_CONTAINS(empty, dir.path().string());
  EXPECT_CONTAINS(empty, "model.safetensors.index.json");
  EXPECT_CONTAINS(empty, "model.safetensors");
  EXPECT_CONTAINS(empty, "a single *.safetensors file (found 0)");

  write_safetensors(dir / "b.safetensors", {});
  write_safetensors(dir / "a.safetensors", {});
  const std::string two = error_message([&] { Checkpoint::open(dir.path()); });
  EXPECT_CONTAINS(two, "(found 2: a.safetensors, b.safetensors)");

  const std::string missing = error_message([&] { Checkpoint::open(dir / "nowhere"); });
  EXPECT_CONTAINS(missing, "checkpoint '" + (dir / "nowhere").string() + "' does not exist");
}

TEST(Checkpoint, ShardedRoundTrip) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  uint64_t total = 0, largest = 0;
  for (const auto& [name, tensor] : tensors) {
    total += tensor.nbytes();
    largest = std::max<uint64_t>(largest, tensor.nbytes());
  }
  const uint64_t max_shard_bytes = 2048;  // the tensors add up to ~10 KiB, the largest are 1.5 KiB
  write_sharded_checkpoint(dir / "model", tensors, max_shard_bytes);

  // The index: total size, every name, and shard names that count the shards.
  std::ifstream in(dir / "model" / "model.safetensors.index.json");
  const json index = json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  ASSERT_EQ(index["weight_map"].size(), tensors.size());
  std::set<std::string> shard_files;
  for (const auto& [name, shard] : index["weight_map"].items()) shard_files.insert(shard.get<std::string>());
  const size_t n = shard_files.size();
  ASSERT_GE(n, 3u);
  size_t i = 0;
  for (const std::string& file : shard_files) {
    char want[64];
    std::snprintf(want, sizeof(want), "model-%05zu-of-%05zu.safetensors", ++i, n);
    EXPECT_EQ(file, want);
    // No shard is over the limit unless it holds one tensor alone.
    const SafetensorsFile shard = SafetensorsFile::open(dir / "model" / file);
    uint64_t bytes = 0;
    for (const std::string& name : shard.names()) bytes += shard.entry(name).end - shard.entry(name).begin;
    EXPECT_TRUE(bytes <= max_shard_bytes || shard.names().size() == 1) << file << " holds " << bytes << " bytes";
    EXPECT_EQ(shard.metadata().at("format"), "pt");
  }
  // Shards follow the given order: the first tensor is in the first shard, the last in the last.
  EXPECT_EQ(index["weight_map"][tensors.front().first], *shard_files.begin());
  EXPECT_EQ(index["weight_map"][tensors.back().first], *shard_files.rbegin());

  const Checkpoint checkpoint = Checkpoint::open(dir / "model");
  expect_checkpoint_holds(checkpoint, tensors);
  // Copies share the opened shards: the same view comes back.
  const Checkpoint copy = checkpoint;
  EXPECT_EQ(copy.get("lm_head.weight").data(), checkpoint.get("lm_head.weight").data());
}

TEST(Checkpoint, OneShardWhenEverythingFits) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  write_sharded_checkpoint(dir.path(), tensors, uint64_t{1} << 30);
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00001.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model-00001-of-00002.safetensors"));
  expect_checkpoint_holds(Checkpoint::open(dir.path()), tensors);
}

TEST(Checkpoint, EachTensorAloneWhenTheLimitIsTiny) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = {{"a", rng.normal_tensor({8})}, {"b", rng.normal_tensor({8})}, {"c", rng.normal_tensor({2})}};
  write_sharded_checkpoint(dir.path(), tensors, 1);
  for (int i = 1; i <= 3; ++i)
    EXPECT_TRUE(fs::exists(dir / ("model-0000" + std::to_string(i) + "-of-00003.safetensors"))) << i;
  expect_checkpoint_holds(Checkpoint::open(dir.path()), tensors);
}

TEST(Checkpoint, WriteShardedRejectsDuplicates) {
  TempDir dir;
  const Tensor t = Tensor::zeros(DType::F32, {4});
  const std::string message = error_message([&] { write_sharded_checkpoint(dir.path(), {{"x", t}, {"x", t}}, 1); });
  EXPECT_CONTAINS(message, "duplicate tensor name 'x'");
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
}

// Shards are opened on first use: a shard that is gone only fails for its own tensors, naming it and them.
TEST(Checkpoint, MissingShard) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  write_sharded_checkpoint(dir.path(), tensors, 2048);
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  const std::string last_shard = json::parse(std::ifstream(dir / "model.safetensors.index.json"))["weight_map"]
                                     ["lm_head.weight"]
                                         .get<std::string>();
  fs::remove(dir / last_shard);
  expect_same_bytes(checkpoint.get("model.embed_tokens.weight"), tensors.front().second);
  const std::string message = error_message([&] { checkpoint.get("lm_head.weight"); });
  EXPECT_CONTAINS(message, (dir / last_shard).string());
  EXPECT_CONTAINS(message, "tensor 'lm_head.weight'");
  EXPECT_CONTAINS(message, "does not exist");
}

TEST(Checkpoint, HandWrittenIndex) {
  TempDir dir;
  const Tensor t = Tensor::from_f32({2}, std::vector<float>{1, 2});
  write_safetensors(dir / "part-a.safetensors", {{"a", t}});
  write_text(dir / "model.safetensors.index.json",
             R"({"metadata": {"total_size": 8}, "weight_map": {"a": "part-a.safetensors", "b": "part-b.safetensors",
                 "c": "part-a.safetensors"}})");
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"a", "b", "c"}));
  expect_same_bytes(checkpoint.get("a"), t);
  const std::string missing = error_message([&] { checkpoint.get("b"); });
  EXPECT_CONTAINS(missing, "shard '" + (dir / "part-b.safetensors").string() + "' of tensor 'b'");
  EXPECT_CONTAINS(missing, "model.safetensors.index.json");
  const std::string absent = error_message([&] { checkpoint.get("c"); });
  EXPECT_CONTAINS(absent, "maps tensor 'c' to '" + (dir / "part-a.safetensors").string() + "'");
  EXPECT_CONTAINS(absent, "that shard has no such tensor");
}

TEST(Checkpoint, MalformedIndex) {
  TempDir dir;
  const fs::path index = dir / "model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"weight_map\": ", "is not valid JSON"},
      {"[]", "is a JSON array, expected an object with a \"weight_map\""},
      {R"({"metadata": {}})", "has no \"weight_map\" object"},
      {R"({"weight_map": ["a"]})", "has no \"weight_map\" object"},
      {R"({"weight_map": {"a": 1}})", "weight_map entry 'a' is 1, expected a shard file name"},
      {R"({"weight_map": {"a": ""}})", "weight_map entry 'a' is \"\""},
  };
  for (const auto& [text, phrase] : cases) {
    SCOPED_TRACE(text);
    write_text(index, text);
    const std::string message = error_message([&] { Checkpoint::open(dir.path()); });
    EXPECT_CONTAINS(message, phrase);
    EXPECT_CONTAINS(message, "index file '" + index.string() + "'");
  }
}

TEST(Checkpoint, MissingTensorSuggestsTheClosestName) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  write_sharded_checkpoint(dir.path(), tensors, 4096);
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  const std::string index = (dir / "model.safetensors.index.json").string();

  const std::string typo = error_message([&] { checkpoint.get("model.layers.1.mlp.experts.gate_up_prj"); });
  EXPECT_CONTAINS(typo, "tensor 'model.layers.1.mlp.experts.gate_up_prj' not found in " + index);
  EXPECT_CONTAINS(typo, " (did you mean 'model.layers.1.mlp.experts.gate_up_proj'?)");

  const std::string layer = error_message([&] { checkpoint.get("model.layers.2.mlp.gate.weights"); });
  EXPECT_CONTAINS(layer, "(did you mean 'model.layers.2.mlp.gate.weight'?)");

  const std::string prefix = error_message([&] { checkpoint.get("base_model.model.lm_head.weight"); });
  EXPECT_CONTAINS(prefix, "(did you mean 'lm_head.weight'?)");

  const std::string unrelated = error_message([&] { checkpoint.get("xyz"); });
  EXPECT_CONTAINS(unrelated, "tensor 'xyz' not found in " + index);
  EXPECT_EQ(unrelated.find("did you mean"), std::string::npos) << unrelated;

  // A single-file checkpoint names the file.
  write_safetensors(dir / "one.safetensors", {{"w", Tensor::zeros(DType::F32, {1})}});
  const std::string single = error_message([&] { Checkpoint::open(dir / "one.safetensors").get("v"); });
  EXPECT_CONTAINS(single, "tensor 'v' not found in " + (dir / "one.safetensors").string());
}

// Many threads asking for tensors of unopened shards at once: each shard is mapped once, and every view
// is right.
TEST(Checkpoint, ConcurrentLazyOpening) {
  TempDir dir;
  test::TestRng rng;
  const NamedTensors tensors = model_tensors(rng);
  write_sharded_checkpoint(dir.path(), tensors, 1024);
  for (int round = 0; round < 20; ++round) {
    const Checkpoint checkpoint = Checkpoint::open(dir.path());
    constexpr int kThreads = 8;
    std::vector<std::vector<const void*>> pointers(kThreads);
    std::vector<std::thread> threads;
    std::atomic<int> mismatches{0}, ready{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ++ready;
        while (ready.load() < kThreads) std::this_thread::yield();  // start together
        for (size_t k = 0; k < tensors.size(); ++k) {
          const auto& [name, tensor] = tensors[(k + t) % tensors.size()];  // each thread starts elsewhere
          const Tensor got = checkpoint.get(name);
          if (got.nbytes() != tensor.nbytes() ||
              (tensor.nbytes() > 0 && std::memcmp(got.data(), tensor.data(), tensor.nbytes()) != 0))
            ++mismatches;
        }
        for (const auto& [name, tensor] : tensors) pointers[t].push_back(checkpoint.get(name).data());
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(mismatches.load(), 0);
    for (int t = 1; t < kThreads; ++t) EXPECT_EQ(pointers[t], pointers[0]) << "thread " << t << " saw another mapping";
  }
}

}  // namespace
}  // namespace moe
