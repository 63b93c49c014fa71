// moe plan: per-rank memory of a model under expert parallelism, and whether the setup can work.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "commands.h"
#include "validators.h"
#include "core/text_file.h"
#include "moe/core/check.h"
#include "engine/quantize_checkpoint.h"
#include "ep/memory_plan.h"
#include "moe/layer/moe_config.h"

namespace moe::cli {

namespace {

struct PlanArgs {
  std::string config, device_memory, placement, dtype = "bf16", model;
  int ranks = 0;
  int64_t max_batched_tokens = 0;
};

void run_plan(const PlanArgs& a) {
  const nlohmann::json config = read_json_file(a.config, "config file");
  const int n_experts = parse_moe_config(config).router.n_experts;
  const ep::Placement placement = ep::resolve_placement(a.placement, n_experts, a.ranks);
  const ep::PlanRequest request{.n_ranks = a.ranks,
                                  .device_bytes = ep::parse_bytes(a.device_memory),
                                  .max_batched_tokens = a.max_batched_tokens,
                                  .dtype = a.dtype == "fp8" ? ep::WeightDType::fp8 : ep::WeightDType::bf16};
  const ep::Plan plan = ep::plan_memory(config, placement, request);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  fmt::print("{} experts on {} ranks of {:.1f} GiB, {} weights, {} tokens per rank per step (estimates)\n",
             n_experts, a.ranks, request.device_bytes / kGiB, a.dtype, a.max_batched_tokens);
  fmt::print("{:>4} {:>5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "rank", "slots", "experts_GiB",
             "other_GiB", "activ_GiB", "comm_GiB", "total_GiB", "kv_room_GiB", "kv_tokens");
  for (const ep::RankMemory& m : plan.ranks)
    fmt::print("{:>4} {:>5} {:>12.2f} {:>12.2f} {:>12.2f} {:>12.3f} {:>12.2f} {:>12.2f} {:>12}\n", m.rank, m.slots,
               m.expert_bytes / kGiB, m.other_bytes / kGiB, m.activation_bytes / kGiB, m.comm_bytes / kGiB,
               m.used() / kGiB, m.kv_room_bytes / kGiB, m.kv_tokens);
  fmt::print("KV cache: {} bytes per token (bf16, all layers); {:.0f} GiB per rank reserved\n",
             plan.kv_bytes_per_token, ep::kPlanReserveBytes / kGiB);
  // One process holding every expert once (a CPU run): rank 0's bytes per expert slot times the experts,
  // plus the weights every rank holds.
  const ep::RankMemory& first = plan.ranks.front();
  const int64_t per_expert = first.slots > 0 ? first.expert_bytes / first.slots : 0;
  fmt::print("host memory of one CPU process running the whole model: about {:.2f} GiB for the {} weights, plus "
             "the KV cache (bytes per token above)\n",
             (per_expert * n_experts + first.other_bytes) / kGiB, a.dtype);
  if (!a.model.empty()) {
    // What a loaded checkpoint holds, beside the estimate (fp8 and int4 experts are what a GPU keeps; the CPU
    // dequantises them to bf16 at load, 2 bytes a weight).
    int64_t planned = 0;
    for (const ep::RankMemory& m : plan.ranks) planned += m.expert_bytes;
    const engine::StoredWeightBytes stored = engine::stored_weight_bytes(a.model);
    fmt::print("checkpoint {} as stored: routed experts {:.4f} GiB ({} bytes; the plan's slots: {} bytes, {:+.2f}%), "
               "all weights {:.4f} GiB\n", a.model, stored.routed_experts / kGiB, stored.routed_experts, planned,
               planned > 0 ? 100.0 * (static_cast<double>(planned) / static_cast<double>(stored.routed_experts) - 1) : 0.0,
               stored.total / kGiB);
  }
  MOE_CHECK(plan.problems.empty(), "this setup does not fit: {} (--ranks, --dtype fp8, --max-batched-tokens)",
            plan.problems.front());
}

}  // namespace

Run add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Per-rank memory of a model under expert parallelism (estimates)");
  cmd->add_option("--config", args->config, "HuggingFace config.json")->required();
  cmd->add_option("--ranks", args->ranks, "number of ranks (one device each)")->required()->check(kPositive);
  cmd->add_option("--device-memory", args->device_memory, "memory of one device, e.g. 141GiB")->required();
  cmd->add_option("--max-batched-tokens", args->max_batched_tokens, "tokens per rank per step")
      ->required()
      ->check(kPositive);
  cmd->add_option("--placement", args->placement, "placement JSON; default contiguous (experts must divide by ranks)");
  cmd->add_option("--model", args->model, "checkpoint directory: also print the bytes its weights take as stored");
  cmd->add_option("--dtype", args->dtype, "weights: bf16, or fp8 (e4m3, 128x128 block scales)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  return [args] { run_plan(*args); };
}

}  // namespace moe::cli
