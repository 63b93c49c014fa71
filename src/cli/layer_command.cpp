// moe layer: runs one MoE block of a HuggingFace checkpoint on hidden states from a safetensors file.
#include <nlohmann/json.hpp>

#include <optional>

#include "commands.h"
#include "validators.h"
#include "moe/core/checkpoint.h"
#include "core/output_file.h"
#include "moe/core/safetensors.h"
#include "layer_cuda.h"
#include "ep_wires.h"
#include "layer_ep.h"
#include "moe/layer/moe_layer.h"

namespace moe::cli {

namespace {

struct LayerArgs {
  std::string config, weights, input, output, prefix, stats;
  std::string paradigm = "contiguous", overflow = "drop", backend = "cpu";
  std::string cpu_experts, cpu_weights = "bf16";  // cpu_experts: empty = by the checkpoint (default_cpu_experts)
  double capacity_factor = 1.0;
  bool ep = false;
  std::string placement, ep_transfer;  // ep_transfer: empty = f32 on the CPU, bf16 on GPUs
  std::string ep_combine;              // empty: f32 on the CPU (its only one), bf16 on GPUs
  bool padded_option_given = false;    // --capacity-factor or --overflow
};

// Without --cpu-experts: the fast bf16 experts for BF16 checkpoints (and whenever --cpu-weights int8 asks
// for them); the exact fp32 reference experts for F32 and F16 checkpoints, whose precision a bf16 pass would
// throw away, and under --ep.
std::string default_cpu_experts(const LayerArgs& a, const MoeWeights& weights) {
  if (a.ep) return "reference";
  if (a.cpu_weights == "int8") return "fast";
  return weights.experts.front().gate.dtype() == DType::BF16 ? "fast" : "reference";
}

void run_layer(LayerArgs a) {
  const NamedPath outputs[] = {{"--output", a.output}, {"--stats", a.stats}};
  const NamedPath inputs[] = {
      {"--config", a.config}, {"--weights", a.weights}, {"--input", a.input}, {"--placement", a.placement}};
  check_output_paths(outputs, inputs);
  MOE_CHECK(a.paradigm == "padded" || !a.padded_option_given,
            "--capacity-factor and --overflow set the padded paradigm's capacity: add --paradigm padded, or drop "
            "them");
  const MoeConfig config = load_moe_config(a.config);
  const Checkpoint checkpoint = Checkpoint::open(a.weights);
  MoeWeights weights = load_moe_weights(checkpoint, a.prefix, config);
  if (a.cpu_experts.empty()) a.cpu_experts = default_cpu_experts(a, weights);
  MOE_CHECK(!a.ep || (a.paradigm == "contiguous" && (a.backend == "cuda" || a.cpu_experts == "reference")),
            "--ep runs the contiguous paradigm, on the CPU reference experts or on GPUs (--backend cuda): drop "
            "--cpu-experts fast and --paradigm padded");
  MOE_CHECK(a.ep || (a.placement.empty() && a.ep_transfer.empty() && a.ep_combine.empty()),
            "--placement, --ep-transfer and --ep-combine need --ep");
  const ep::EpWires wires = resolve_ep_wires(a.backend, a.ep_transfer, a.ep_combine);
  MOE_CHECK(a.cpu_weights == "bf16" || a.cpu_experts == "fast",
            "--cpu-weights {} needs the fast CPU experts (drop --cpu-experts reference)", a.cpu_weights);
  LayerOptions options{.paradigm = a.paradigm == "padded" ? Paradigm::padded : Paradigm::contiguous,
                       .capacity_factor = a.capacity_factor,
                       .overflow = a.overflow == "renormalize" ? OverflowPolicy::renormalize : OverflowPolicy::drop,
                       .backend = Backend::cpu,
                       .cpu_experts = a.cpu_experts == "reference" ? CpuExperts::reference : CpuExperts::fast,
                       .cpu_weights = a.cpu_weights == "int8" ? quant::WeightFormat::int8 : quant::WeightFormat::bf16};
  const SafetensorsFile input = SafetensorsFile::open(a.input);
  MOE_CHECK(input.contains("hidden_states"), "input file '{}' has no tensor 'hidden_states' (it must hold [T, H])",
            a.input);
  if (a.ep) {
    run_layer_ep(config, std::move(weights), input.get("hidden_states"),
                 {.placement = a.placement,
                  .wires = wires,
                  .output = a.output,
                  .stats = a.stats,
                  .backend = a.backend});
    return;
  }
  LayerOutput out;
  if (a.backend == "cuda") {
#if MOE_WITH_CUDA
    out = run_layer_cuda(config, weights, input.get("hidden_states"), options);
#else
    MOE_FAIL("--backend cuda: this build has no CUDA backend (no nvcc at configure time); use --backend cpu");
#endif
  } else {
    out = MoeLayer(config, std::move(weights), options).forward(input.get("hidden_states"));
  }

  check_output_finite(out.hidden_states, out.topk, a.prefix.empty() ? "the block" : "block '" + a.prefix + "'");
  // Both files are written before either is renamed into place: a failure leaves neither.
  OutputFile y(a.output, "--output");
  write_safetensors(y.temp_path(), {{"hidden_states", out.hidden_states},
                                    {"topk_ids", out.topk.ids},
                                    {"topk_weights", out.topk.weights}});
  std::optional<OutputFile> stats;
  if (!a.stats.empty()) {
    stats.emplace(a.stats, "--stats");
    stats->stream() << routing::to_json(out.stats).dump(2) << "\n";
  }
  if (stats) stats->commit();
  y.commit();
}

}  // namespace

Run add_layer_command(CLI::App& app) {
  auto args = std::make_shared<LayerArgs>();
  CLI::App* cmd = app.add_subcommand("layer", "Run one MoE block of a HuggingFace checkpoint on hidden states");
  cmd->add_option("--config", args->config, "HuggingFace config.json")->required();
  cmd->add_option("--weights", args->weights,
                  "safetensors file, or a checkpoint directory (sharded with model.safetensors.index.json)")
      ->required();
  cmd->add_option("--input", args->input, "safetensors file with hidden_states [T, H] (F32, BF16 or F16)")
      ->required();
  cmd->add_option("--output", args->output, "safetensors file to write hidden_states, topk_ids, topk_weights")
      ->required();
  cmd->add_option("--prefix", args->prefix, "name prefix of the block inside a full checkpoint, e.g. model.layers.7.mlp.");
  cmd->add_option("--paradigm", args->paradigm, "contiguous (permute/grouped GEMM/unpermute) or padded (capacity)")
      ->check(CLI::IsMember({"contiguous", "padded"}));
  cmd->add_option("--capacity-factor", args->capacity_factor, "padded: rows per expert = ceil(F * T * k / E)")
      ->check(kPositive);
  cmd->add_option("--overflow", args->overflow, "padded: what happens to pairs beyond capacity")
      ->check(CLI::IsMember({"drop", "renormalize"}));
  cmd->add_option("--stats", args->stats, "write per-expert load statistics as JSON");
  cmd->add_option("--backend", args->backend, "cpu, or cuda (bf16 experts on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--cpu-experts", args->cpu_experts,
                  "fast (bf16/int8 kernels) or reference (fp32 exact, fp64-accumulated); default: fast for BF16 "
                  "checkpoints, reference for F32/F16 ones and under --ep")
      ->check(CLI::IsMember({"fast", "reference"}));
  cmd->add_option("--cpu-weights", args->cpu_weights,
                  "fast experts' weight format: bf16 (any float checkpoint converted at load) or int8 (per-channel, "
                  "quantised at load; activations int8 per token)")
      ->check(CLI::IsMember({"bf16", "int8"}));
  cmd->add_flag("--ep", args->ep,
                "expert parallelism under mpirun: each rank routes its share of the tokens and runs its experts; "
                "rank 0 writes the outputs (--backend cuda: one process per GPU, NCCL between them)");
  cmd->add_option("--placement", args->placement,
                  "--ep: placement JSON (which experts each rank holds, replicas allowed); default contiguous");
  cmd->add_option("--ep-transfer", args->ep_transfer, "--ep: dispatch wire format f32 (exact; the CPU default), "
                  "bf16 (the GPU default) or fp8 (e4m3, one scale per 128 values)")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
  cmd->add_option("--ep-combine", args->ep_combine,
                  "--ep: wire format of the partial sums sent back, bf16 (the GPU default) or f32 (the CPU's only "
                  "one; on GPUs the output then equals one GPU's up to fp32 addition order)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  CLI::Option* capacity = cmd->get_option("--capacity-factor");
  CLI::Option* overflow = cmd->get_option("--overflow");
  return [args, capacity, overflow] {
    args->padded_option_given = capacity->count() + overflow->count() > 0;
    run_layer(*args);
  };
}

}  // namespace moe::cli
