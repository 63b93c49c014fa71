#include "ep_wires.h"

#include "moe/core/check.h"

namespace moe::cli {

ep::EpWires resolve_ep_wires(const std::string& backend, const std::string& transfer, const std::string& combine) {
  const std::string fallback = backend == "cuda" ? "bf16" : "f32";
  const std::string combine_name = combine.empty() ? fallback : combine;
  MOE_CHECK(backend == "cuda" || combine_name == "f32",
            "--ep-combine {}: the CPU expert-parallel path sends its partial sums back as f32 only; drop "
            "--ep-combine or use --backend cuda", combine_name);
  const ep::EpWires wires{.dispatch = ep::parse_transfer(transfer.empty() ? fallback : transfer),
                          .combine = ep::parse_transfer(combine_name)};
  // The GPU path's limits (the library refuses them too, in its own terms), named by their options here.
  MOE_CHECK(backend != "cuda" || wires.dispatch != ep::Transfer::f32,
            "--ep --backend cuda sends bf16 rows (the GPU layer's input is bf16): use --ep-transfer bf16 or fp8");
  MOE_CHECK(backend != "cuda" || wires.combine != ep::Transfer::fp8,
            "--ep --backend cuda sends the partial sums back as bf16 or f32, not fp8: use --ep-combine bf16 or f32");
  return wires;
}

}  // namespace moe::cli
