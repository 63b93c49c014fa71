// moe quantize: a float checkpoint's experts to fp8 (e4m3, block scales) or int4 (AWQ), and a report of the
// weight error and of what it does to routing and greedy tokens (engine/quantize_checkpoint.h).
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>

#include "commands.h"
#include "moe/core/check.h"
#include "engine/quantize_checkpoint.h"
#include "ep/memory_plan.h"
#include "moe/layer/moe_config.h"

namespace moe::cli {

namespace {

struct QuantizeArgs {
  std::string model, to, out, calibration, report;
  bool quantize_gate = false;
  std::vector<int64_t> block_size{128, 128};
  int64_t group_size = 128;
  int64_t max_prompt_tokens = 512;
};

std::vector<std::string> read_prompts(const std::string& file) {
  std::ifstream in(file);
  MOE_CHECK(in.good(), "cannot open the calibration file '{}' (--calibration)", file);
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) prompts.push_back(line);
  MOE_CHECK(!prompts.empty(), "calibration file '{}' has no prompts: write one prompt per line (--calibration)", file);
  return prompts;
}

// The plan's fp8 estimate of the routed experts on one rank, for the written config.
int64_t planned_expert_bytes(const std::string& out_dir) {
  std::ifstream in(out_dir + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  const int experts = parse_moe_config(config).router.n_experts;
  const ep::PlanRequest request{.n_ranks = 1, .device_bytes = int64_t{1} << 50, .max_batched_tokens = 1,
                                .dtype = ep::WeightDType::fp8};
  return ep::plan_memory(config, ep::resolve_placement("", experts, 1), request).ranks[0].expert_bytes;
}

void print_report(const engine::QuantizeReport& r, const QuantizeArgs& a) {
  constexpr double kMiB = 1024.0 * 1024.0;
  fmt::print("{} tensors quantised to {}, {} carried over; {:.2f} MiB -> {:.2f} MiB\n", r.quantized_tensors, r.method,
             r.carried_tensors, r.source_bytes / kMiB, r.written_bytes / kMiB);
  fmt::print("weight error (||dequantised - stored|| / ||stored||, per layer over its routed experts; every expert "
             "in --report)\n");
  fmt::print("{:>6} {:>8} {:>10} {:>10} {:>7} {:>10} {:>10}\n", "layer", "experts", "mean", "max", "worst", "shared",
             "gate");
  std::map<int64_t, std::vector<engine::ExpertError>> layers;
  for (const engine::ExpertError& e : r.errors) layers[e.layer].push_back(e);
  for (const auto& [layer, errors] : layers) {
    double sum = 0, worst = -1, shared = -1, gate = -1;
    int64_t worst_expert = -1, n = 0;
    for (const engine::ExpertError& e : errors) {
      if (e.expert == -1) shared = e.rel_error;
      else if (e.expert == -2) gate = e.rel_error;
      else {
        sum += e.rel_error, ++n;
        if (e.rel_error > worst) worst = e.rel_error, worst_expert = e.expert;
      }
    }
    const auto cell = [](double v) { return v < 0 ? std::string("-") : fmt::format("{:.3e}", v); };
    fmt::print("{:>6} {:>8} {:>10} {:>10} {:>7} {:>10} {:>10}\n", layer, n, cell(n > 0 ? sum / n : -1), cell(worst),
               worst_expert, cell(shared), cell(gate));
  }
  const bool gate_kept = r.flip_rate_gate_kept() >= 0;
  fmt::print("calibration: {} prompts, {} tokens ({}), teacher-forced on the CPU\n", r.calibration_prompts,
             r.calibration_tokens, a.calibration.empty() ? "built-in text" : a.calibration);
  fmt::print("{:>6} {:>8} {:>7} {:>10}{}\n", "layer", "tokens", "flips", "flip_rate", gate_kept ? "  flip_rate_gate_kept" : "");
  for (const engine::LayerRouting& l : r.routing) {
    fmt::print("{:>6} {:>8} {:>7} {:>10.4f}", l.layer, l.decisions, l.flips,
               static_cast<double>(l.flips) / static_cast<double>(std::max<int64_t>(l.decisions, 1)));
    if (gate_kept)
      fmt::print("  {:>19.4f}", static_cast<double>(l.flips_gate_kept) / static_cast<double>(std::max<int64_t>(l.decisions, 1)));
    fmt::print("\n");
  }
  fmt::print("top-k flip rate: {:.4f}{}\n", r.flip_rate(),
             gate_kept ? fmt::format(" (with the gate in its own dtype: {:.4f}; the rest is the quantised gate's)",
                                     r.flip_rate_gate_kept())
                       : std::string(" (gate in its own dtype)"));
  fmt::print("greedy next-token agreement: {:.4f} ({} of {} positions)\n", r.greedy_agreement(), r.greedy_agree,
             r.greedy_positions);
  if (a.to == "fp8")
    fmt::print("routed experts as stored: {} bytes (fp8 + scales); moe plan --dtype fp8 estimates {} bytes on one rank\n",
               r.routed_expert_bytes, planned_expert_bytes(a.out));
  else
    fmt::print("routed experts as stored: {} bytes (int4 + zeros + scales)\n", r.routed_expert_bytes);
}

void run_quantize(const QuantizeArgs& a) {
  engine::QuantizeOptions o;
  o.model = a.model;
  o.out = a.out;
  o.quantize_gate = a.quantize_gate;
  o.max_prompt_tokens = a.max_prompt_tokens;
  if (a.to == "fp8") {
    MOE_CHECK(a.block_size.size() == 2 && a.block_size[0] > 0 && a.block_size[1] > 0,
              "--block-size takes two positive sizes N,K (rows, columns of one scale block), e.g. 128,128");
    o.scheme.method = quant::QuantMethod::fp8_block;
    o.scheme.fp8_block = {.n = a.block_size[0], .k = a.block_size[1]};
  } else {
    o.scheme.method = quant::QuantMethod::awq_int4;
    o.scheme.group_size = a.group_size;
  }
  if (!a.calibration.empty()) o.calibration = read_prompts(a.calibration);
  if (!a.report.empty()) {  // fails before the work, not after it
    std::ofstream probe(a.report, std::ios::app);
    MOE_CHECK(probe.good(), "cannot write the report file '{}' (--report)", a.report);
  }
  o.progress = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  try {
    const engine::QuantizeReport report = engine::quantize_checkpoint(o);
    print_report(report, a);
    if (!a.report.empty()) {
      std::ofstream out(a.report, std::ios::trunc);
      out << engine::quantize_report_json(report).dump(2) << "\n";
      out.close();
      MOE_CHECK(!out.fail(), "cannot write the report file '{}' (--report)", a.report);
    }
    fmt::print("wrote {}\n", a.out);
  } catch (const Error& e) {
    MOE_FAIL("{} (--model {}, --out {})", e.what(), a.model, a.out);
  }
}

}  // namespace

Run add_quantize_command(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantise a checkpoint's experts to fp8 or int4 and report the cost");
  cmd->add_option("--model", args->model, "float checkpoint directory (config.json, safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--to", args->to, "fp8 (e4m3, block scales, DeepSeek-V3's format) or int4 (AWQ GEMM layout)")
      ->required()
      ->check(CLI::IsMember({"fp8", "int4"}));
  cmd->add_option("--out", args->out, "new checkpoint directory (must not exist, or be empty; not inside --model)")
      ->required();
  cmd->add_flag("--quantize-gate", args->quantize_gate,
                "quantise the router too (changes top-k choices: the report shows by how much)");
  cmd->add_option("--calibration", args->calibration, "text file, one prompt per line (default: built-in text)");
  cmd->add_option("--report", args->report, "write the full report (every expert's error) as JSON here");
  cmd->add_option("--block-size", args->block_size, "fp8 scale block N,K (default 128,128)")->delimiter(',')->expected(2);
  cmd->add_option("--group-size", args->group_size, "int4 inputs per scale and zero point (default 128)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-prompt-tokens", args->max_prompt_tokens, "calibration prompts are cut to this many tokens")
      ->check(CLI::PositiveNumber);
  return [args] { run_quantize(*args); };
}

}  // namespace moe::cli
