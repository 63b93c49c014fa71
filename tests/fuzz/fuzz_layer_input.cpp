// The `moe layer` input path (src/cli/layer_command.cpp, CPU backend) on arbitrary input:
//   byte 0 (options) | config.json | kPartSeparator | weights.safetensors | kPartSeparator | input.safetensors
// Options: bit 0 reference experts (else fast), bit 1 padded paradigm, bit 2 int8 weights, bit 3 renormalize.
// Each part is written to a file and read as `moe layer --config --weights --input` reads it, then the block
// runs; the outputs must have the promised shapes and expert ids.
#include <cmath>

#include "fuzz_target.h"
#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"
#include "moe/layer/moe_layer.h"

namespace moe::fuzz {

int fuzz_layer_input(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::vector<std::string_view> parts =
      split_parts(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  if (parts.size() != 3) return 0;
  const std::filesystem::path dir = scratch_dir();
  write_file(dir / "layer_config.json", parts[0]);
  write_file(dir / "layer_weights.safetensors", parts[1]);
  write_file(dir / "layer_input.safetensors", parts[2]);
  return expect_errors([&] {
    const MoeConfig config = load_moe_config(dir / "layer_config.json");
    const Checkpoint checkpoint = Checkpoint::open(dir / "layer_weights.safetensors");
    MoeWeights weights = load_moe_weights(checkpoint, "", config);
    const LayerOptions options{.paradigm = flags & 2 ? Paradigm::padded : Paradigm::contiguous,
                               .capacity_factor = 1.0,
                               .overflow = flags & 8 ? OverflowPolicy::renormalize : OverflowPolicy::drop,
                               .backend = Backend::cpu,
                               .cpu_experts = flags & 1 ? CpuExperts::reference : CpuExperts::fast,
                               .cpu_weights = flags & 4 ? quant::WeightFormat::int8 : quant::WeightFormat::bf16};
    const SafetensorsFile input = SafetensorsFile::open(dir / "layer_input.safetensors");
    MOE_CHECK(input.contains("hidden_states"), "no hidden_states");
    const Tensor x = input.get("hidden_states");
    const LayerOutput out = MoeLayer(config, std::move(weights), options).forward(x);
    const int64_t T = x.size(0), H = config.hidden_size, k = config.router.top_k;
    MOE_FUZZ_ASSERT(out.hidden_states.shape() == std::vector<int64_t>({T, H}), "output shape {}",
                    out.hidden_states.shape_string());
    MOE_FUZZ_ASSERT(out.topk.ids.shape() == std::vector<int64_t>({T, k}), "topk shape {}", out.topk.ids.shape_string());
    const int32_t* ids = out.topk.ids.data_as<int32_t>();
    for (int64_t i = 0; i < T * k; ++i)
      MOE_FUZZ_ASSERT(ids[i] >= 0 && ids[i] < config.router.n_experts, "expert id {} of {}", ids[i],
                      config.router.n_experts);
  });
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_layer_input)
