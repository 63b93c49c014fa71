#include "ep_wires.h"

#include "moe/core/check.h"

namespace moe::cli {

EpWires resolve_ep_wires(const std::string& backend, const std::string& transfer, const std::string& combine) {
  const std::string fallback = backend == "cuda" ? "bf16" : "f32";
  EpWires wires{.transfer = transfer.empty() ? fallback : transfer, .combine = combine.empty() ? fallback : combine};
  MOE_CHECK(backend == "cuda" || wires.combine == "f32",
            "--ep-combine {}: the CPU expert-parallel path sends its partial sums back as f32 only; drop "
            "--ep-combine or use --backend cuda", wires.combine);
  return wires;
}

}  // namespace moe::cli
