// moe info: what this build contains and which accelerators and CPU features it sees.
#include <fmt/core.h>

#include <filesystem>
#include <memory>

#include "build_info.h"
#include "commands.h"
#include "moe/core/check.h"
#include "moe/core/checkpoint.h"
#include "core/thread_pool.h"
#include "moe/engine/engine.h"
#if MOE_WITH_CUDA
#include "cuda/device_info.h"
#endif

namespace moe::cli {

namespace {

// The host memory a CPU run of the checkpoint in `dir` keeps resident for its weights: the mapped
// non-expert weights, and the experts either mapped (reference experts) or as the fast experts' bf16
// repacked copy, whose mapped pages are dropped once packed.
std::string size_text(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return bytes >= 1024 * kMiB ? fmt::format("{:.2f} GiB", bytes / (1024 * kMiB)) : fmt::format("{:.1f} MiB", bytes / kMiB);
}

void print_model_memory(const std::string& dir) {
  const Checkpoint checkpoint = Checkpoint::open(dir);
  int64_t expert_bytes = 0, expert_elements = 0, other_bytes = 0;
  for (const std::string& name : checkpoint.names()) {
    const Tensor t = checkpoint.get(name);
    if (name.find(".experts.") != std::string::npos) {
      expert_bytes += t.nbytes();
      expert_elements += t.numel();
    } else {
      other_bytes += t.nbytes();
    }
  }
  const bool fast = engine::default_cpu_experts(dir) == CpuExperts::fast;
  const int64_t resident = other_bytes + (fast ? expert_elements * 2 : expert_bytes);
  fmt::print("model {}: {} of weights ({} experts, {} other)\n", dir, size_text(expert_bytes + other_bytes),
             size_text(expert_bytes), size_text(other_bytes));
  fmt::print("host memory of a CPU run: about {} for the weights ({}), plus the KV cache and activations\n",
             size_text(resident),
             fast ? "default fast CPU experts: their bf16 repacked copy, the checkpoint's expert pages dropped"
                  : "default reference CPU experts: the checkpoint mapped");
}

void run_info(const std::string& model) {
  MOE_CHECK(model.empty() || std::filesystem::is_directory(model),
            "--model '{}' is not a directory: give a HuggingFace model directory", model);
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
  if (!model.empty()) print_model_memory(model);
}

}  // namespace

Run add_info_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "Print what this build contains and the accelerators it sees");
  cmd->add_option("--model", *model, "also the host memory a CPU run of the model in DIR needs for its weights");
  return [model] { run_info(*model); };
}

}  // namespace moe::cli
