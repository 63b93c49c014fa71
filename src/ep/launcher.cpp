#include "ep/launcher.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace moe::ep {

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    int rank = 0;
    const auto [end, ec] = std::from_chars(value, value + std::strlen(value), rank);
    if (ec == std::errc() && *end == '\0' && rank >= 0) return rank;
  }
  return 0;
}

}  // namespace moe::ep
