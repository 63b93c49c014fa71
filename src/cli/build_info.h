#pragma once
// What this build of `moe` holds, for `moe --version` and `moe info`.

#include <string>

namespace moe::cli {

// "moe 0.1.0 (CUDA: yes, NCCL: no, MPI: yes, CPU ISA: avx512)"; the ISA is the fast CPU experts' on this CPU.
std::string version_line();

}  // namespace moe::cli
