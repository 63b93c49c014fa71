// A sharded checkpoint's model.safetensors.index.json on arbitrary bytes, next to two real shards
// (model-00001-of-00002.safetensors with "a" and "b", model-00002-of-00002.safetensors with "c"): open,
// fetch every listed tensor, and ask for a missing name (the "did you mean" search over the names).
#include "fuzz_target.h"
#include "moe/core/checkpoint.h"

namespace moe::fuzz {

namespace {

const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = scratch_dir() / "checkpoint";
    std::filesystem::create_directories(d);
    const float values[6] = {1, 2, 3, 4, 5, 6};
    write_safetensors(d / "model-00001-of-00002.safetensors",
                      {{"a", Tensor::from_f32({2, 3}, values)}, {"b", Tensor::from_f32({6}, values)}});
    write_safetensors(d / "model-00002-of-00002.safetensors", {{"c", Tensor::from_f32({1, 1}, std::span(values, 1))}});
    return d;
  }();
  return dir;
}

}  // namespace

int fuzz_checkpoint_index(const uint8_t* data, size_t size) {
  const std::filesystem::path& dir = checkpoint_dir();
  write_file(dir / "model.safetensors.index.json", std::string_view(reinterpret_cast<const char*>(data), size));
  return expect_errors([&] {
    const Checkpoint checkpoint = Checkpoint::open(dir);
    for (const std::string& name : checkpoint.names()) {
      MOE_FUZZ_ASSERT(checkpoint.contains(name), "names() lists '{}' but contains() denies it", name);
      expect_errors([&] { (void)checkpoint.get(name); });
    }
    (void)checkpoint.get("model.layers.0.mlp.experts.0.gate_proj.weight");
  });
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_checkpoint_index)
