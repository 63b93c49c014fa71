#pragma once
// The wire formats of an expert-parallel run from `--ep-transfer` and `--ep-combine`, shared by `moe layer
// --ep` and `moe generate --ep`.

#include <string>

#include "ep/transfer.h"

namespace moe::cli {

// The options as given (names of ep::Transfer), empty ones replaced by the backend's defaults (f32 and
// f32 on the CPU, bf16 and bf16 on GPUs). Throws moe::Error for a combine wire the CPU path lacks (it sends
// f32 only), and for the wires the GPU path lacks (an f32 dispatch, an fp8 combine).
ep::EpWires resolve_ep_wires(const std::string& backend, const std::string& transfer, const std::string& combine);

}  // namespace moe::cli
