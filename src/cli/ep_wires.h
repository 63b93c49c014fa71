#pragma once
// The wire formats of an expert-parallel run (`--ep-transfer`, `--ep-combine`), shared by `moe layer --ep`
// and `moe generate --ep`.

#include <string>

namespace moe::cli {

struct EpWires {
  std::string transfer;  // dispatch: f32 | bf16 | fp8
  std::string combine;   // partial sums back: f32 | bf16
};

// The options as given, empty ones replaced by the backend's defaults (f32 and f32 on the CPU, bf16 and
// bf16 on GPUs). Throws moe::Error for a combine wire the CPU path lacks (it sends f32 only).
EpWires resolve_ep_wires(const std::string& backend, const std::string& transfer, const std::string& combine);

}  // namespace moe::cli
