#include "ep_wires.h"

#include "moe/core/check.h"

namespace moe::cli {

ep::EpWires resolve_ep_wires(const std::string& backend, const std::string& transfer, const std::string& combine) {
  const std::string fallback = backend == "cuda" ? "bf16" : "f32";
  const std::string combine_name = combine.empty() ? fallback : combine;
  MOE_CHECK(backend == "cuda" || combine_name == "f32",
            "--ep-combine {}: the CPU expert-parallel path sends its partial sums back as f32 only; drop "
            "--ep-combine or use --backend cuda", combine_name);
  return {.dispatch = ep::parse_transfer(transfer.empty() ? fallback : transfer),
          .combine = ep::parse_transfer(combine_name)};
}

}  // namespace moe::cli
