// The MoE part of config.json (every supported model_type) on arbitrary text, and what a parsed config
// promises the layer: positive sizes, top-k within the experts, groups that divide them.
#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "moe/layer/moe_config.h"

namespace moe::fuzz {

int fuzz_moe_config(const uint8_t* data, size_t size) {
  const nlohmann::json config =
      nlohmann::json::parse(data, data + size, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;  // not JSON: load_moe_config's own check, nothing to fuzz past it
  return expect_errors([&] {
    const MoeConfig m = parse_moe_config(config);
    MOE_FUZZ_ASSERT(m.hidden_size > 0 && m.expert_intermediate_size > 0 && m.shared_intermediate_size >= 0,
                    "sizes {} {} {}", m.hidden_size, m.expert_intermediate_size, m.shared_intermediate_size);
    MOE_FUZZ_ASSERT(m.router.top_k >= 1 && m.router.top_k <= m.router.n_experts, "top_k {} of {} experts",
                    m.router.top_k, m.router.n_experts);
    for (int64_t layer = 0; layer < std::min<int64_t>(m.num_hidden_layers, 64); ++layer) (void)is_moe_layer(m, layer);
  });
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_moe_config)
