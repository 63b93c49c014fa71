#include "build_info.h"

#include <fmt/core.h>

#include "cpu/fast_experts.h"
#include "ep/communicator.h"
#include "ep/device_communicator.h"

namespace moe::cli {

std::string version_line() {
  const auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  std::string isa = "none (no AVX2: reference experts only)";
  if (cpu::fast_experts_available()) {
    try {
      isa = std::string(cpu::isa_name(cpu::detect_isa()));
    } catch (const std::exception& e) {  // MOE_CPU_ISA asks for one this CPU lacks
      isa = "unusable MOE_CPU_ISA";
    }
  }
  return fmt::format("moe {} (CUDA: {}, NCCL: {}, MPI: {}, CPU ISA: {})", MOE_VERSION, yes_no(MOE_WITH_CUDA),
                     yes_no(ep::nccl_available()), yes_no(ep::mpi_available()), isa);
}

}  // namespace moe::cli
