// moe bench: the whole layer on model shapes, against the floor and the ceilings measured in the run.
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench.h"
#include "bench/bench_model.h"
#include "bench/random_model_shapes.h"
#include "commands.h"
#include "core/output_file.h"
#include "moe/core/check.h"
#include "output_directory.h"
#include "validators.h"

namespace moe::cli {

namespace {

struct BenchArgs {
  std::string backend = "cpu", shape = "qwen3-30b-a3b", tokens = "1,16,128", routing = "balanced", json;
  int repeats = 20;
  CpuBenchOptions cpu;                       // --cpu-weights, --layers, --max-gib, --min-seconds
  std::vector<const CLI::Option*> cpu_only;  // refused with --backend cuda
  std::string cuda_weights = "bf16";         // --cuda-weights: bf16, or fp8 / int4 timed beside bf16
  const CLI::Option* cuda_weights_option = nullptr;  // refused with --backend cpu
  bool dispatch = false, tokens_given = false;  // --dispatch: the expert-parallel exchange (bench_dispatch.cpp)
  std::string wire = "bf16,fp8";
  int64_t hidden = 7168;
  ModelBenchArgs model;       // --model: the whole model (bench_model.cpp, bench_model_cuda.cpp)
  std::string random_model;   // --random-model: a model shape on random weights made on the GPU
  std::string batches = "1";  // --batch: its batch sizes on the GPU
  std::string write_model;    // --write-model: write the random checkpoint for --model
  int64_t model_layers = 4;
  bool repeats_given = false;
};

std::vector<int64_t> parse_tokens(const std::string& text) {
  std::vector<int64_t> tokens;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int64_t t = 0;
    try {
      t = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MOE_CHECK(used == item.size() && t >= 1, "--tokens '{}': expected a comma-separated list of positive counts",
              text);
    tokens.push_back(t);
  }
  MOE_CHECK(!tokens.empty(), "--tokens is empty");
  return tokens;
}

void run_dispatch(const BenchArgs& a) {
  DispatchBenchArgs d{.hidden = a.hidden, .repeats = a.repeats, .json = a.json};
  if (a.tokens_given) d.tokens = parse_tokens(a.tokens);
  d.wires.clear();
  std::stringstream in(a.wire);
  for (std::string item; std::getline(in, item, ',');) d.wires.push_back(ep::parse_transfer(item));
  MOE_CHECK(!d.wires.empty(), "--wire is empty: use bf16, fp8, f32 or a comma-separated list of them");
  if (a.backend == "cuda") {
#if MOE_WITH_CUDA
    run_dispatch_bench_cuda_command(d);
#else
    MOE_FAIL("this build has no CUDA backend (no nvcc at configure time): use --backend cpu");
#endif
    return;
  }
  run_dispatch_bench_command(d);
}

void run_bench(const BenchArgs& a) {
  const NamedPath outputs[] = {{"--json", a.json}};
  const NamedPath inputs[] = {{"--model", a.model.model}};
  check_output_paths(outputs, inputs);
  if (a.dispatch) return run_dispatch(a);
  if (!a.write_model.empty()) {
    OutputDirectory out(a.write_model, "--write-model", inputs);
    const std::string what = write_random_model(out.temp_path(), a.model_layers);
    out.commit();
    fmt::print("wrote {} ({})\n", a.write_model, what);
    return;
  }
  if (!a.random_model.empty()) {
    MOE_CHECK(a.model.model.empty(), "--random-model and --model each name the model: give one");
    MOE_CHECK(a.backend == "cuda", "--random-model builds its weights in GPU memory: add --backend cuda");
    const model::ModelConfig config = random_model_config(a.random_model);  // checked before any GPU work
    ModelBenchArgs m = a.model;
    if (a.repeats_given) m.repeats = a.repeats;
    m.batches = parse_tokens(a.batches);
#if MOE_WITH_CUDA
    return run_random_model_bench_cuda(m, config, a.random_model);
#else
    MOE_FAIL("this build has no CUDA backend (no nvcc at configure time): --random-model needs one");
#endif
  }
  if (!a.model.model.empty()) {
    ModelBenchArgs m = a.model;
    if (a.repeats_given) m.repeats = a.repeats;
    m.batches = parse_tokens(a.batches);
    if (a.backend == "cuda") {
#if MOE_WITH_CUDA
      return run_model_bench_cuda(m);
#else
      MOE_FAIL("this build has no CUDA backend (no nvcc at configure time): use --backend cpu");
#endif
    }
    MOE_CHECK(m.batches == std::vector<int64_t>{1}, "--batch is the GPU's (--backend cuda); the CPU model bench runs one sequence");
    m.cpu_weights = a.cpu.weights == "int8" ? quant::WeightFormat::int8 : quant::WeightFormat::bf16;
    return run_model_bench(m);
  }
  const BenchShape shape = parse_bench_shape(a.shape);
  const std::vector<int64_t> tokens = parse_tokens(a.tokens);
  const BenchRouting routing = a.routing == "zipf" ? BenchRouting::zipf : BenchRouting::balanced;
  std::vector<BenchRow> rows;
  if (a.backend == "cuda") {
    for (const CLI::Option* option : a.cpu_only)
      MOE_CHECK(option->count() == 0, "{} is a CPU option: drop it with --backend cuda", option->get_name());
#if MOE_WITH_CUDA
    rows = run_cuda_bench(shape, tokens, routing, a.repeats, a.cuda_weights);
#else
    MOE_FAIL("this build has no CUDA backend (no nvcc at configure time): use --backend cpu");
#endif
  } else {
    MOE_CHECK(a.cuda_weights_option->count() == 0, "--cuda-weights is a CUDA option: drop it with --backend cpu");
    CpuBenchOptions cpu = a.cpu;
    cpu.routing = routing;
    cpu.repeats = a.repeats;
    rows = run_cpu_bench(shape, tokens, cpu);
  }
  print_rows(rows);
  if (!a.json.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const BenchRow& r : rows) list.push_back(to_json(r));
    write_text_file(a.json, list.dump(2) + "\n", "--json");
  }
}

}  // namespace

Run add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Time the whole MoE layer on model shapes against the roofline floor");
  cmd->add_option("--backend", args->backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--shape", args->shape, "qwen3-30b-a3b, deepseek-v3, mixtral-8x7b, olmoe-1b-7b or custom:H,I,E,k")
      ->capture_default_str();
  CLI::Option* tokens =
      cmd->add_option("--tokens", args->tokens, "comma-separated token counts (per rank with --dispatch: 128,4096)")
          ->capture_default_str();
  cmd->add_option("--routing", args->routing, "balanced (uniform logits) or zipf (skewed)")
      ->check(CLI::IsMember({"balanced", "zipf"}))
      ->capture_default_str();
  cmd->add_option("--json", args->json, "write the rows as a JSON list");
  cmd->add_option("--repeats", args->repeats, "timed runs per token count (median reported)")
      ->check(CLI::Range(3, 100000))
      ->capture_default_str();
  args->cuda_weights_option =
      cmd->add_option("--cuda-weights", args->cuda_weights,
                      "CUDA: expert weights bf16, or fp8 / int4 (timed beside the bf16 layer in the same run; their "
                      "floors: their bytes)")
          ->check(CLI::IsMember({"bf16", "fp8", "int4"}))
          ->capture_default_str();
  args->cpu_only = {
      cmd->add_option("--cpu-weights", args->cpu.weights, "CPU: expert weights bf16 or int8 (int8 floors: int8 bytes)")
          ->check(CLI::IsMember({"bf16", "int8"}))
          ->capture_default_str(),
      cmd->add_option("--layers", args->cpu.layers, "CPU: layers rotated for cold weights (0: enough to exceed the cache)")
          ->check(kNonNegative)
          ->capture_default_str(),
      cmd->add_option("--max-gib", args->cpu.max_gib,
                      "CPU: bound on the packed expert weights of all layers (beyond it experts alias)")
          ->check(kPositive)
          ->capture_default_str(),
      cmd->add_option("--min-seconds", args->cpu.min_seconds, "CPU: time each token count at least this long too")
          ->check(kNonNegative)
          ->capture_default_str()};
  cmd->add_flag("--dispatch", args->dispatch,
                "time expert-parallel dispatch and combine instead (under mpirun -np R, R >= 2; --backend cuda: one "
                "GPU per rank, NCCL)");
  cmd->add_option("--wire", args->wire, "--dispatch: wire formats, comma-separated bf16, fp8, f32")
      ->capture_default_str();
  cmd->add_option("--hidden", args->hidden, "--dispatch: hidden size H")->check(kPositive)->capture_default_str();
  cmd->add_option("--model", args->model.model,
                  "time the whole model in DIR instead: prefill and decode tokens/s and the floor (the CPU: the "
                  "time of each part; --repeats defaults to 3 here)");
  cmd->add_option("--random-model", args->random_model,
                  "time a full-depth model of a shape on random weights made in GPU memory (--backend cuda): "
                  "qwen3-30b-a3b, mixtral-8x7b, deepseek-v2-lite or an HF config.json file");
  cmd->add_option("--batch", args->batches, "--model --backend cuda: comma-separated batch sizes (sequences per step)")
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", args->model.prompt_tokens, "--model: prompt length")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_flag("--enforce-eager", args->model.enforce_eager, "--model/--random-model --backend cuda: run every decode step op by op instead of replaying its CUDA graph (for debugging and profiling)");
  cmd->add_option("--decode-tokens", args->model.decode_tokens, "--model: tokens decoded one by one after it")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--write-model", args->write_model,
                  "write a random-weight Qwen3-MoE-shaped BF16 checkpoint into DIR (for --model) and exit");
  cmd->add_option("--model-layers", args->model_layers, "--write-model: decoder layers (about 1.3 GB each)")
      ->check(kPositive)
      ->capture_default_str();
  CLI::Option* repeats = cmd->get_option("--repeats");
  return [args, tokens, repeats] {
    args->tokens_given = tokens->count() > 0;
    args->repeats_given = repeats->count() > 0;
    run_bench(*args);
  };
}

}  // namespace moe::cli
