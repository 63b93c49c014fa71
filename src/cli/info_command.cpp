// moe info: what this build contains and which accelerators and CPU features it sees.
#include <fmt/core.h>

#include "build_info.h"
#include "commands.h"
#include "moe/core/thread_pool.h"
#if MOE_WITH_CUDA
#include "moe/cuda/device_info.h"
#endif

namespace moe::cli {

namespace {

void run_info() {
  fmt::print("{}\n", version_line());
  fmt::print("cpu: {} threads in the pool (MOE_NUM_THREADS overrides)\n", ThreadPool::global().size());
#if MOE_WITH_CUDA
  const auto gpus = cuda::visible_gpus();
  fmt::print("cuda backend: built; {} GPU(s) visible\n", gpus.size());
  for (const auto& g : gpus)
    fmt::print("  gpu {}: {} (sm_{}{}, {} SMs, {:.0f} GiB)\n", g.index, g.name, g.compute_major, g.compute_minor,
               g.sm_count, g.memory_gib);
#else
  fmt::print("cuda backend: not built (no CUDA compiler at configure time, or -DMOE_CUDA=OFF)\n");
#endif
}

}  // namespace

Run add_info_command(CLI::App& app) {
  app.add_subcommand("info", "Print what this build contains and the accelerators it sees");
  return [] { run_info(); };
}

}  // namespace moe::cli
