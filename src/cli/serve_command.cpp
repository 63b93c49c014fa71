// moe serve: an OpenAI-compatible server over a model directory (server/server.h), with vLLM's flag
// names. The command turns flags into EngineOptions and ServerOptions, prints one line once it accepts
// requests, and stops cleanly on SIGINT or SIGTERM (a thread waits for them; every other thread has them
// blocked).
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <pthread.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "bench/bench_model.h"
#include "bench/random_model_shapes.h"
#include "commands.h"
#include "engine/ep_serving.h"
#include "engine/expert_parallel.h"
#include "ep_wires.h"
#include "eplb_flags.h"
#include "generate_report.h"
#include "progress_line.h"
#include "moe/core/check.h"
#include "moe/engine/engine.h"
#include "server/server.h"
#include "text/chat_template.h"

namespace moe::cli {

namespace {

namespace fs = std::filesystem;

struct ServeArgs {
  std::string model_dir, random_model, host = "127.0.0.1", served_model_name, api_key, backend = "cpu";
  int port = 8000;
  int64_t max_model_len = 0, max_num_seqs = 256, max_num_batched_tokens = 0;
  bool max_num_batched_tokens_given = false;  // else by backend
  double gpu_memory_utilization = 0.9;
  std::string chat_template, trace_routing;
  bool expert_parallel = false;  // --enable-expert-parallel, under mpirun
  bool enforce_eager = false;    // --backend cuda: no CUDA graphs
  std::string placement, ep_transfer, ep_combine;
  engine::EplbOptions eplb;
};

// One JSON line per routing event (seq: the engine's request id); events may come from any thread.
class RoutingTrace {
 public:
  explicit RoutingTrace(const std::string& path) : path_(path), file_(path) {
    MOE_CHECK(file_.good(), "--trace-routing: cannot write '{}'", path);
  }
  void write(const model::RoutingEvent& event) {
    std::lock_guard lock(mutex_);
    file_ << trace_line(event).dump() << '\n';
  }

 private:
  std::string path_;
  std::ofstream file_;
  std::mutex mutex_;
};

// Whether DIR has a chat template where transformers looks (a model without one is served without chat).
bool has_chat_template(const fs::path& dir) {
  if (fs::exists(dir / "chat_template.jinja") || fs::exists(dir / "chat_template.json")) return true;
  std::ifstream config(dir / "tokenizer_config.json");
  if (!config) return false;
  const nlohmann::json j = nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("chat_template");
}

void run_serve(const ServeArgs& a) {
  const fs::path dir = a.model_dir;
  MOE_CHECK(a.model_dir.empty() != a.random_model.empty(),
            "--model and --random-model each name the model: give one of them");
  std::optional<model::ModelConfig> random_config;
  if (!a.random_model.empty()) {
    MOE_CHECK(a.backend == "cuda", "--random-model builds its weights in GPU memory: add --backend cuda");
    MOE_CHECK(a.chat_template.empty(),
              "--chat-template with --random-model: a random model has no tokenizer, so it serves "
              "/v1/completions with token-id prompts only");
    random_config = random_model_config(a.random_model);  // checked before any GPU work
  }
  MOE_CHECK(random_config || fs::is_directory(dir),
            "--model '{}' is not a directory: give a HuggingFace model directory (config.json "
            "and safetensors weights)",
            a.model_dir);
  MOE_CHECK(a.port >= 0 && a.port <= 65535, "--port must be in [0, 65535] (0: any free port), got {}",
            a.port);
  MOE_CHECK(a.max_num_seqs >= 1, "--max-num-seqs must be >= 1, got {}", a.max_num_seqs);
  MOE_CHECK(a.max_num_batched_tokens >= 1 || !a.max_num_batched_tokens_given,
            "--max-num-batched-tokens must be >= 1, got {}", a.max_num_batched_tokens);
  MOE_CHECK(a.max_model_len >= 0, "--max-model-len must be >= 1, got {}", a.max_model_len);
  MOE_CHECK(a.gpu_memory_utilization > 0.0 && a.gpu_memory_utilization <= 1.0,
            "--gpu-memory-utilization must be in (0, 1], got {}", a.gpu_memory_utilization);
  MOE_CHECK(a.chat_template.empty() || fs::is_regular_file(a.chat_template),
            "--chat-template '{}' is not a file: give a Jinja chat template", a.chat_template);
#if !MOE_WITH_CUDA
  MOE_CHECK(a.backend != "cuda",
            "--backend cuda: this build has no CUDA backend (no nvcc at configure time); use --backend cpu");
#endif

  // NOTE: blocked before any thread starts (the model's thread pool, the server's), so that only the
  // waiter below takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // Expert parallelism: every rank loads the model and runs every step on its own engine replica (attention
  // replicated, the MoE blocks over the EP layer, engine/expert_parallel.h); rank 0 serves HTTP and shares
  // each step's plan with the others (engine/ep_serving.h), which follow it until rank 0 stops.
  MOE_CHECK(a.expert_parallel || (a.placement.empty() && a.ep_transfer.empty() && a.ep_combine.empty() &&
                                   a.eplb.interval_steps == 0),
            "--placement, --ep-transfer, --ep-combine and --eplb-interval-steps need --enable-expert-parallel");
  MOE_CHECK(!a.expert_parallel || !random_config,
            "--enable-expert-parallel runs the decoder on the host (the MoE blocks on the GPUs with --backend "
            "cuda), and --random-model makes its weights for the GPU decoder: give --model DIR");
  const ep::EpWires wires = resolve_ep_wires(a.backend, a.ep_transfer, a.ep_combine);

  engine::EngineOptions options;
  options.max_num_seqs = a.max_num_seqs;
  // vLLM's defaults for its server: 8192 on a large GPU, 2048 otherwise. On the H200 the 48-layer
  // Qwen3-30B-A3B shape served 1,974 -> 2,271 tok/s at concurrency 64 with 8192 (2026-12-02): a wave of new
  // 128-token prompts joins in one step instead of four.
  // Under expert parallelism the decoder runs on the host, whatever the backend: the CPU's default.
  const bool gpu_decoder = a.backend == "cuda" && !a.expert_parallel;
  options.max_num_batched_tokens =
      a.max_num_batched_tokens_given ? a.max_num_batched_tokens : (gpu_decoder ? 8192 : 2048);
  options.max_model_len = a.max_model_len;
  // The fraction is of the free memory where the KV pool lives: the GPU's with the cuda backend.
  options.kv_cache_memory_fraction = a.gpu_memory_utilization;
  options.model.backend = a.backend == "cuda" ? model::ModelBackend::cuda : model::ModelBackend::cpu;
  options.model.enforce_eager = a.enforce_eager;
  if (!random_config) options.model.cpu_experts = engine::default_cpu_experts(dir);
  std::unique_ptr<engine::ExpertParallel> ep;  // outlives the engine, whose MoE blocks hold its communicator
  if (a.expert_parallel) {
    engine::EplbOptions eplb = a.eplb;
    eplb.between_steps = true;
    ep = std::make_unique<engine::ExpertParallel>(
        a.backend == "cuda" ? model::ModelBackend::cuda : model::ModelBackend::cpu, a.placement, wires,
        engine::ep_exchange_tokens(options), eplb);
    options.model.cpu_experts = CpuExperts::reference;  // the EP layer's experts on the CPU
    options.kv_memory_bytes = engine::agreed_kv_memory(*ep);
    ep->install(options.model);
  }
  std::optional<RoutingTrace> trace;
  if (!a.trace_routing.empty() && (!ep || ep->rank() == 0)) {
    trace.emplace(a.trace_routing);
    options.on_routing = [&](const model::RoutingEvent& event) { trace->write(event); };
  }
  // A random model (no checkpoint, no tokenizer) is loaded here and the engine made over it; it is declared
  // first so that it outlives the engine.
  std::unique_ptr<model::CausalLM> random_lm;
  std::unique_ptr<engine::Engine> engine;
  cli::ProgressLine progress(true);
  options.model.progress = [&](int64_t loaded, int64_t layers) {
    progress.show_bar("loading " + (a.model_dir.empty() ? a.random_model : a.model_dir), loaded, layers, "layers");
  };
  if (random_config) {
#if MOE_WITH_CUDA
    options.model.max_batched_tokens = engine::moe_workspace_tokens(options);
    random_lm = load_random_model_cuda(*random_config, a.random_model, options.model);
    engine = std::make_unique<engine::Engine>(*random_lm, options);
#endif
  } else {
    engine = engine::Engine::load(dir, options);
  }
  progress.clear();
  const std::string name = a.model_dir.empty() ? a.random_model : a.model_dir;
  std::optional<engine::EpServing> serving;
  if (ep) serving.emplace(*ep);
  if (serving && !serving->leader()) {
    serving->follow(*engine);
    return;
  }

  server::ServerOptions server_options{
      .host = a.host,
      .port = a.port,
      .served_model_name = a.served_model_name.empty() ? name : a.served_model_name,
      .api_key = a.api_key,
      .ep = serving ? &*serving : nullptr};
  if (!a.chat_template.empty())
    server_options.chat_template = ChatTemplate::from_file(a.chat_template, dir);
  else if (!random_config && has_chat_template(dir))
    server_options.chat_template = ChatTemplate::load(dir);
  server::Server server(*engine, server_options);
  server.bind();
  const engine::KvUsage kv = engine->kv_usage();
  fmt::print(stderr,
             "KV cache: {} blocks of {} tokens ({} tokens; max_model_len {}); steps of up to {} tokens, {} "
             "sequences\n",
             kv.total_blocks, kv.block_tokens, kv.total_blocks * kv.block_tokens, engine->max_model_len(),
             options.max_num_batched_tokens, options.max_num_seqs);
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
  });
  fmt::print("serving {} on http://{}:{}{}\n", server_options.served_model_name, a.host, server.port(),
             ep ? fmt::format(" (expert-parallel over {} ranks)", ep->size()) : "");
  std::fflush(stdout);
  // NOTE: run() throws when the expert-parallel ranks failed; the waiter is woken so that it ends first.
  std::exception_ptr failed;
  try {
    server.run();
  } catch (const Error&) {
    failed = std::current_exception();
    pthread_kill(waiter.native_handle(), SIGTERM);
  }
  waiter.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

Run add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API (continuous batching)");
  cmd->add_option("--model", args->model_dir,
                  "model directory: config.json, safetensors weights, tokenizer.json");
  cmd->add_option("--random-model", args->random_model,
                  "instead of --model, with --backend cuda: a full-depth model on random weights made in GPU "
                  "memory, " + fmt::format("{}", fmt::join(random_model_names(), "|")) + " or an HF config.json (token-id prompts only; for "
                  "benchmarks)");
  cmd->add_option("--host", args->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", args->port, "port to listen on (default 8000; 0: any free port)");
  cmd->add_option("--served-model-name", args->served_model_name,
                  "the model name the API answers to and lists (default: the --model value)");
  cmd->add_option("--api-key", args->api_key,
                  "require 'Authorization: Bearer KEY' on every endpoint but /health");
  cmd->add_option("--backend", args->backend, "cpu, or cuda (the whole decoder on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option(
      "--max-model-len", args->max_model_len,
      "the longest sequence, prompt and generated tokens (default: the model's max_position_embeddings)");
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "the most requests running together (default 256)");
  auto* batched_tokens =
      cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens,
                      "the most tokens in one step: decode tokens, then prompt chunks (default 8192 with --backend "
                      "cuda, 2048 on the CPU)");
  cmd->add_option(
      "--gpu-memory-utilization", args->gpu_memory_utilization,
      "the fraction of the free memory where the KV cache lives (the host's; the GPU's with --backend cuda) that its block pool may take (default 0.9)");
  cmd->add_option(
      "--chat-template", args->chat_template,
      "a Jinja chat template file for /v1/chat/completions (default: the model's tokenizer_config.json)");
  cmd->add_flag("--enforce-eager", args->enforce_eager, "run every decode step op by op instead of replaying its CUDA graph (--backend cuda; for debugging and profiling)");
  auto* ep = cmd->add_flag("--enable-expert-parallel", args->expert_parallel,
                           "under mpirun -np R: the experts spread over the ranks (CPU reference experts and rows "
                           "over MPI; with --backend cuda one GPU per rank and rows over NCCL, the decoder on the "
                           "host), rank 0 serves HTTP; adds /admin/rebalance, /admin/placement, "
                           "/scale_elastic_ep");
  cmd->add_option("--placement", args->placement,
                  "--enable-expert-parallel: placement JSON (which experts each rank holds); default contiguous");
  cmd->add_option("--ep-transfer", args->ep_transfer,
                  "--enable-expert-parallel: dispatch wire format f32 (exact; the CPU's only one), bf16 (the GPU "
                  "default) or fp8")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
  cmd->add_option("--ep-combine", args->ep_combine,
                  "--enable-expert-parallel: wire format of the partial sums sent back, bf16 (the GPU default) or "
                  "f32 (the CPU's only one)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  const EplbFlags eplb = add_eplb_flags(*cmd, args->eplb, "--enable-expert-parallel: ",
                                        "0: only on POST /admin/rebalance");
  for (CLI::Option* flag : {eplb.interval, eplb.window, eplb.redundant, eplb.min_gain}) flag->needs(ep);
  cmd->add_option(
      "--trace-routing", args->trace_routing,
      "write every routing decision as a JSON line: seq (request id), pos, token, layer, experts, weights");
  return [args, batched_tokens] {
    args->max_num_batched_tokens_given = batched_tokens->count() > 0;
    run_serve(*args);
  };
}

}  // namespace moe::cli
