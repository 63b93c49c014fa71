#pragma once
// The mpirun prefix of the CLI tests that launch `moe` on several ranks: MOE_MPIEXEC (CMake's FindMPI, set by
// the test target), oversubscribed (CI has two cores), as root (containers), one CPU thread a rank.

#include <string>

namespace moe::test {

inline std::string mpirun(int ranks) {
  return std::string(MOE_MPIEXEC) + " --oversubscribe --allow-run-as-root -x MOE_NUM_THREADS=1 -np " +
         std::to_string(ranks) + " ";
}

}  // namespace moe::test
