// moe layer: runs one MoE block of a HuggingFace checkpoint on hidden states from a safetensors file.
#include <nlohmann/json.hpp>

#include <fstream>

#include "commands.h"
#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"
#include "layer_cuda.h"
#include "moe/layer/moe_layer.h"

namespace moe::cli {

namespace {

struct LayerArgs {
  std::string config, weights, input, output, prefix, stats;
  std::string paradigm = "contiguous", overflow = "drop", backend = "cpu";
  std::string cpu_experts = "fast", cpu_weights = "bf16";
  double capacity_factor = 1.0;
};

void run_layer(const LayerArgs& a) {
  MOE_CHECK(a.cpu_weights == "bf16" || a.cpu_experts == "fast",
            "--cpu-weights {} needs the fast CPU experts (drop --cpu-experts reference)", a.cpu_weights);
  const MoeConfig config = load_moe_config(a.config);
  const Checkpoint checkpoint = Checkpoint::open(a.weights);
  LayerOptions options{.paradigm = a.paradigm == "padded" ? Paradigm::padded : Paradigm::contiguous,
                       .capacity_factor = a.capacity_factor,
                       .overflow = a.overflow == "renormalize" ? OverflowPolicy::renormalize : OverflowPolicy::drop,
                       .backend = Backend::cpu,
                       .cpu_experts = a.cpu_experts == "reference" ? CpuExperts::reference : CpuExperts::fast,
                       .cpu_weights = a.cpu_weights == "int8" ? cpu::WeightFormat::int8 : cpu::WeightFormat::bf16};
  MoeWeights weights = load_moe_weights(checkpoint, a.prefix, config);
  const SafetensorsFile input = SafetensorsFile::open(a.input);
  MOE_CHECK(input.contains("hidden_states"), "input file '{}' has no tensor 'hidden_states' (it must hold [T, H])",
            a.input);
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

  write_safetensors(a.output, {{"hidden_states", out.hidden_states},
                               {"topk_ids", out.topk.ids},
                               {"topk_weights", out.topk.weights}});
  if (!a.stats.empty()) {
    std::ofstream file(a.stats);
    file << routing::to_json(out.stats).dump(2) << "\n";
    MOE_CHECK(file.good(), "cannot write the stats file '{}'", a.stats);
  }
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
      ->check(CLI::PositiveNumber);
  cmd->add_option("--overflow", args->overflow, "padded: what happens to pairs beyond capacity")
      ->check(CLI::IsMember({"drop", "renormalize"}));
  cmd->add_option("--stats", args->stats, "write per-expert load statistics as JSON");
  cmd->add_option("--backend", args->backend, "cpu, or cuda (bf16 experts on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--cpu-experts", args->cpu_experts,
                  "fast (bf16/int8 kernels, the default) or reference (fp64-accumulated oracle)")
      ->check(CLI::IsMember({"fast", "reference"}));
  cmd->add_option("--cpu-weights", args->cpu_weights,
                  "fast experts' weight format: bf16 (any float checkpoint converted at load) or int8 (per-channel, "
                  "quantised at load; activations int8 per token)")
      ->check(CLI::IsMember({"bf16", "int8"}));
  return [args] { run_layer(*args); };
}

}  // namespace moe::cli
