// The model runner's config.json reader (attention, RoPE, special tokens on top of the MoE keys) on
// arbitrary text; an optional second part is generation_config.json. A parsed config then builds its
// rotary embedding, as the model's constructor does before any weight is read.
#include <nlohmann/json.hpp>

#include "../../src/model/rope.h"
#include "fuzz_target.h"
#include "moe/model/model_config.h"

namespace moe::fuzz {

int fuzz_model_config(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> parts = split_parts(std::string_view(reinterpret_cast<const char*>(data), size));
  const nlohmann::json config = nlohmann::json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;
  nlohmann::json generation;
  if (parts.size() > 1) {
    generation = nlohmann::json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
    if (generation.is_discarded()) return 0;
  }
  return expect_errors([&] {
    const model::ModelConfig m = model::parse_model_config(config, generation);
    MOE_FUZZ_ASSERT(m.vocab_size > 0 && m.num_layers > 0 && m.num_heads > 0 && m.num_kv_heads > 0,
                    "sizes {} {} {} {}", m.vocab_size, m.num_layers, m.num_heads, m.num_kv_heads);
    const model::Rope rope(m.rope);
    std::vector<float> head(static_cast<size_t>(m.rope.dim), 1.0f);
    cpu::rope_head(rope.cpu_table(), head.data(), 7);
  });
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_model_config)
