// moe generate: loads a HuggingFace MoE checkpoint into an Engine, generates from one or several prompts
// (engine::generate), and reports the text, the speed and which experts every token used. The command
// turns flags into EngineOptions and prints; the flags' checks come first, so that a bad one is named as
// the flag.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <mutex>
#include <optional>

#include "commands.h"
#include "progress_line.h"
#include "ep_wires.h"
#include "eplb_flags.h"
#include "error_report.h"
#include "generate_report.h"
#include "validators.h"
#include "id_list.h"
#include "moe/core/check.h"
#include "core/output_file.h"
#include "moe/engine/engine.h"
#include "engine/expert_parallel.h"
#include "moe/engine/generation.h"
#include "ep/launcher.h"
#include "ep/transfer.h"
#include "moe/model/model_config.h"
#include "moe/text/tokenizer.h"

namespace moe::cli {

namespace {

namespace fs = std::filesystem;

struct GenerateArgs {
  std::string model_dir;
  std::vector<std::string> prompts;     // --prompt, repeatable
  std::vector<std::string> prompt_ids;  // --prompt-ids, repeatable
  int64_t max_new_tokens = 32;
  int64_t max_batched_tokens = 4096;
  double temperature = 0.0, top_p = 1.0;
  int top_k = 0;
  std::string seed = "0";  // read by parse_seed: CLI11 would wrap "-1" and saturate "2^64"
  std::string backend = "cpu", cpu_experts;  // cpu_experts: empty = by the checkpoint's expert dtype
  std::string json, trace, stats;
  bool print_ids = false;
  bool enforce_eager = false;  // --backend cuda: no CUDA graphs
  bool ep = false;
  std::string placement, ep_transfer;  // ep_transfer empty: f32 on the CPU, bf16 on GPUs
  std::string ep_combine;              // empty: f32 on the CPU (its only one), bf16 on GPUs
  engine::EplbOptions eplb;            // elastic placement under --ep
  // Which of the sampling options the command line gave: the others come from generation_config.json.
  bool has_temperature = false, has_top_p = false, has_top_k = false, has_seed = false;
};

// Writes one JSON line per routing event into a temporary file that commit() puts in place; events may
// come from any thread.
class TraceWriter {
 public:
  explicit TraceWriter(const std::string& path) : file_(path, "--trace-routing") { file_.stream(); }
  void write(const model::RoutingEvent& event) {
    std::lock_guard lock(mutex_);
    file_.stream() << trace_line(event).dump() << '\n';
  }
  void commit() { file_.commit(); }

 private:
  OutputFile file_;
  std::mutex mutex_;
};

std::string duration(double seconds) {
  return seconds < 1.0 ? fmt::format("{:.1f} ms", seconds * 1e3) : fmt::format("{:.2f} s", seconds);
}

// Text of `ids`. A model's vocabulary is often padded past the tokenizer's (a random-weight model picks
// such ids too): ids the tokenizer does not know are left out, as transformers' decode does.
std::string decode_known(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  std::vector<int32_t> known;
  for (int32_t id : ids)
    if (id >= 0 && id < tokenizer.vocab_size()) known.push_back(id);
  return tokenizer.decode(known);
}

uint64_t parse_seed(const std::string& text) {
  uint64_t seed = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  MOE_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(),
            "--seed '{}' is not a seed: give an integer in [0, 2^64)", text);
  return seed;
}

// The model's context window bounds prompt plus generated tokens, as vLLM's max_model_len does: a prompt
// longer than it is refused, generation past it is cut to fit (and the user told so on stderr).
int64_t fit_max_new_tokens(const std::vector<std::vector<int32_t>>& prompts, int64_t max_new_tokens,
                           int64_t max_positions, bool root) {
  size_t longest = 0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    MOE_CHECK(static_cast<int64_t>(prompts[s].size()) <= max_positions,
              "prompt {} has {} tokens, more than the model's max_position_embeddings {}: shorten it", s,
              prompts[s].size(), max_positions);
    longest = std::max(longest, prompts[s].size());
  }
  const int64_t room = max_positions - static_cast<int64_t>(longest);
  if (max_new_tokens <= room) return max_new_tokens;
  if (root)
    fmt::print(stderr, "note: --max-new-tokens {} capped at {}: the model's max_position_embeddings is {} and the "
               "longest prompt has {} tokens\n", max_new_tokens, room, max_positions, longest);
  return room;
}

void run_generate(const GenerateArgs& a) {
  const fs::path dir = a.model_dir;
  MOE_CHECK(fs::is_directory(dir), "--model '{}' is not a directory: give a HuggingFace model directory (config.json "
            "and safetensors weights)", a.model_dir);
  const NamedPath outputs[] = {{"--json", a.json}, {"--trace-routing", a.trace}, {"--stats", a.stats}};
  const NamedPath inputs[] = {{"--model", a.model_dir}, {"--placement", a.placement}};
  check_output_paths(outputs, inputs);
  MOE_CHECK(a.prompts.empty() != a.prompt_ids.empty(),
            "give the prompt either as text (--prompt TEXT) or as token ids (--prompt-ids 1,2,3), not both");
  MOE_CHECK(a.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got {}", a.max_new_tokens);
  MOE_CHECK(a.max_batched_tokens >= 1, "--max-batched-tokens must be >= 1, got {}", a.max_batched_tokens);
  // The model's generation_config.json sets the defaults, as in transformers; each flag given overrides one.
  engine::SamplingParams sampling = engine::generation_config_sampling(dir);
  if (a.has_temperature) sampling.temperature = a.temperature;
  if (a.has_top_p) sampling.top_p = a.top_p;
  if (a.has_top_k) sampling.top_k = a.top_k;
  sampling.seed = parse_seed(a.seed);
  MOE_CHECK(sampling.temperature != 0.0 || !(a.has_top_p || a.has_top_k || a.has_seed),
            "--top-p, --top-k and --seed take effect when sampling: add --temperature T (> 0); without it (or with "
            "--temperature 0) decoding is greedy unless the model's generation_config.json sets do_sample");
  engine::check_sampling_params(sampling);
#if !MOE_WITH_CUDA
  MOE_CHECK(a.backend != "cuda",
            "--backend cuda: this build has no CUDA backend (no nvcc at configure time); use --backend cpu");
#endif

  // The tokenizer (the engine loads DIR/tokenizer.json): needed to read --prompt, optional for --prompt-ids
  // (then no text is shown).
  const fs::path tokenizer_file = dir / "tokenizer.json";
  MOE_CHECK(fs::exists(tokenizer_file) || a.prompts.empty(), "--prompt needs a tokenizer, and '{}' does not exist: "
            "give token ids with --prompt-ids 1,2,3 instead", tokenizer_file.string());
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& ids : a.prompt_ids) prompts.push_back(parse_id_list(ids, "--prompt-ids"));
  // Text is encoded with the tokenizer's special tokens (Llama's leading <s>), as transformers' tokenizer()
  // does by default. Prompts are known before the model loads, so that its KV cache holds what this run needs.
  std::optional<Tokenizer> tokenizer_storage;
  if (!a.prompts.empty()) tokenizer_storage = Tokenizer::load(tokenizer_file);
  for (const std::string& text : a.prompts)
    prompts.push_back(tokenizer_storage->encode(text, /*add_special_tokens=*/true));
  const int64_t max_positions = model::load_model_config(dir).max_position_embeddings;
  const int64_t max_new_tokens = fit_max_new_tokens(prompts, a.max_new_tokens, max_positions, ep::launcher_rank() == 0);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());

  // --max-batched-tokens is the step budget; the CUDA MoE blocks' workspace and the expert-parallel buffers
  // follow from it (engine_options.h).
  engine::EngineOptions options;
  options.max_num_batched_tokens = a.max_batched_tokens;
  options.max_num_seqs = static_cast<int64_t>(a.prompts.size() + a.prompt_ids.size());  // one batch
  // NOTE: the KV cache is sized for this run's longest sequence, not the model's whole context: on a GPU the
  // pool is allocated up front.
  options.max_model_len = std::max<int64_t>(1, static_cast<int64_t>(longest) + max_new_tokens);
  options.load_tokenizer = false;

  // Expert parallelism: every rank runs the whole model on the same prompts (attention replicated), the MoE
  // blocks exchange tokens between ranks and end with the same output bytes on every rank
  // (engine/expert_parallel.h); the ranks compute identical logits and so pick identical tokens. Rank 0 alone prints and writes files.
  std::unique_ptr<engine::ExpertParallel> ep;  // outlives the engine, whose model's MoE blocks hold its communicators
  MOE_CHECK(a.ep || (a.placement.empty() && a.ep_transfer.empty() && a.ep_combine.empty() &&
                     a.eplb.interval_steps == 0),
            "--placement, --ep-transfer, --ep-combine and --eplb-interval-steps need --ep");
  const ep::EpWires wires = resolve_ep_wires(a.backend, a.ep_transfer, a.ep_combine);
  if (a.ep) {
    MOE_CHECK(a.backend == "cuda" || a.cpu_experts != "fast",
              "--ep runs the MoE blocks on the CPU reference experts (or with --backend cuda on one GPU per rank): "
              "drop --cpu-experts fast");
    const model::ModelBackend backend = a.backend == "cuda" ? model::ModelBackend::cuda : model::ModelBackend::cpu;
    ep = std::make_unique<engine::ExpertParallel>(backend, a.placement, wires,
                                                  engine::ep_exchange_tokens(options), a.eplb);
  }
  const bool root = !ep || ep->rank() == 0;

  cli::ProgressLine progress(root);
  options.model.backend = a.backend == "cuda" ? model::ModelBackend::cuda : model::ModelBackend::cpu;
  options.model.enforce_eager = a.enforce_eager;
  options.model.cpu_experts = a.cpu_experts.empty()   ? engine::default_cpu_experts(dir)
                              : a.cpu_experts == "fast" ? CpuExperts::fast
                                                        : CpuExperts::reference;
  options.model.progress = [&](int64_t loaded, int64_t layers) {
    progress.show_bar("loading " + a.model_dir, loaded, layers, "layers");
  };
  if (ep) {
    if (a.backend == "cpu") options.model.cpu_experts = CpuExperts::reference;
    ep->install(options.model);
  }
  std::optional<TraceWriter> trace;  // opened once the model is loaded
  if (!a.trace.empty() && root) options.on_routing = [&](const model::RoutingEvent& event) { trace->write(event); };
  const std::unique_ptr<engine::Engine> engine = engine::Engine::load(dir, options);
  progress.clear();
  const model::ModelInfo& info = engine->info();
  // Token ids need no tokenizer: with --prompt-ids it is read only to show the text, after the run.
  const Tokenizer* tokenizer = tokenizer_storage ? &*tokenizer_storage : nullptr;

  if (options.on_routing) trace.emplace(a.trace);
  engine::GenerationOptions generation;
  generation.max_new_tokens = max_new_tokens;
  generation.sampling = sampling;
  generation.progress = [&](const std::string& line) { progress.show(line); };
  const engine::GenerationResult result = engine::generate(*engine, prompts, generation);
  progress.clear();
  // Collective.
  const std::vector<engine::EpLayerStats> ep_stats = ep ? ep->gather_stats() : std::vector<engine::EpLayerStats>{};

  if (!root) return;
  std::optional<Tokenizer> display_tokenizer;
  if (!tokenizer && fs::exists(tokenizer_file)) {
    try {
      display_tokenizer = Tokenizer::load(tokenizer_file);
      tokenizer = &*display_tokenizer;
    } catch (const Error& e) {
      fmt::print(stderr, "note: the text is not shown (ids only): {}\n", printable(e.what()));
    }
  }
  std::vector<std::string> texts;
  if (tokenizer)
    for (const auto& ids : result.generated) texts.push_back(decode_known(*tokenizer, ids));

  fmt::print("{}: {} layers ({} MoE), {} experts, top-{}; {} backend, {} CPU experts{}\n", info.model_type,
             info.num_layers, info.moe_layers.size(), info.num_experts, info.top_k, a.backend,
             options.model.cpu_experts == CpuExperts::fast ? "fast" : "reference",
             ep ? fmt::format(", expert-parallel over {} ranks ({} transfer, {} combine)", ep->size(),
                              ep::transfer_name(wires.dispatch), ep::transfer_name(wires.combine))
                : "");
  for (size_t s = 0; s < prompts.size(); ++s) {
    if (prompts.size() > 1) fmt::print("\n[sequence {}]\n", s);
    if (tokenizer) {
      fmt::print("prompt:    {}\n", decode_known(*tokenizer, prompts[s]));
      fmt::print("generated: {}\n", texts[s]);
    }
    if (a.print_ids || !tokenizer) {
      fmt::print("prompt ids:    {}\n", fmt::join(prompts[s], " "));
      fmt::print("generated ids: {}\n", fmt::join(result.generated[s], " "));
    }
    fmt::print("({} prompt tokens, {} generated, {})\n", prompts[s].size(), result.generated[s].size(),
               result.stopped_at_eos[s]                                    ? "stopped at EOS"
               : generation.max_new_tokens < a.max_new_tokens ? "reached max_position_embeddings"
                                                              : "reached --max-new-tokens");
  }
  fmt::print("\nprefill: {} tokens in {} ({:.1f} tokens/s)\n", result.prefill_tokens, duration(result.prefill_seconds),
             result.prefill_tokens_per_s());
  fmt::print("decode:  {} tokens in {} ({:.1f} tokens/s)\n", result.decode_tokens, duration(result.decode_seconds),
             result.decode_tokens_per_s());
  fmt::print("expert load per MoE layer (prompt and generated tokens; imbalance = busiest expert / mean):\n");
  for (const std::string& line : load_summary(info, result)) fmt::print("  {}\n", line);
  if (ep) {
    fmt::print("expert-parallel work per rank (all MoE layers; (token, expert) pairs its experts ran, dispatch and "
               "combine bytes):\n");
    for (const std::string& line : ep->summary(ep_stats)) fmt::print("  {}\n", line);
  }

  // Every file is complete before any is put in place: a failure leaves none of them.
  std::optional<OutputFile> json, stats;
  if (!a.json.empty()) {
    json.emplace(a.json, "--json");
    json->stream() << result_json(prompts, result, texts).dump() << "\n";
  }
  if (!a.stats.empty()) {
    nlohmann::ordered_json j = stats_json(info, result);
    if (ep) j["ep"] = ep->stats_json(ep_stats);
    stats.emplace(a.stats, "--stats");
    stats->stream() << j.dump(2) << "\n";
  }
  if (trace) trace->commit();
  if (json) json->commit();
  if (stats) stats->commit();
}

}  // namespace

Run add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text with a HuggingFace MoE checkpoint and report speed and expert routing");
  cmd->add_option("--model", args->model_dir, "model directory: config.json, safetensors weights, tokenizer.json")
      ->required();
  cmd->add_option("--prompt", args->prompts,
                  "prompt text (needs DIR/tokenizer.json); repeat --prompt to run several prompts as one batch")
      ->allow_extra_args(false);
  cmd->add_option("--prompt-ids", args->prompt_ids, "prompt as comma-separated token ids, e.g. 1,2,3; repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--max-new-tokens", args->max_new_tokens,
                  "tokens to generate per prompt at most (capped at the model's max_position_embeddings)")
      ->check(integer_at_least(0));
  auto* temperature =
      cmd->add_option("--temperature", args->temperature,
                      "sample with this temperature (> 0; 0: greedy); default: the model's generation_config.json "
                      "(do_sample, temperature), else greedy");
  auto* top_p = cmd->add_option("--top-p", args->top_p,
                                "sampling: keep the most likely tokens up to this mass (0, 1]; default: "
                                "generation_config.json's top_p when it samples, else 1");
  auto* top_k = cmd->add_option("--top-k", args->top_k,
                                "sampling: keep the K most likely tokens (0: all); default: generation_config.json's "
                                "top_k when it samples (transformers' 50 if it has none), else 0");
  auto* seed = cmd->add_option("--seed", args->seed, "sampling: random seed, an integer in [0, 2^64)");
  cmd->add_option("--backend", args->backend, "cpu, or cuda (the whole decoder on the GPU; with --ep the MoE blocks only)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--cpu-experts", args->cpu_experts,
                  "reference (fp32 exact) or fast (bf16 kernels); default: fast for BF16 checkpoints, reference for "
                  "F32/F16 ones")
      ->check(CLI::IsMember({"fast", "reference"}));
  cmd->add_option("--max-batched-tokens", args->max_batched_tokens,
                  "most tokens in one forward: longer prompts are prefilled in pieces")
      ->check(integer_at_least(1));
  cmd->add_option("--json", args->json,
                  "write {prompt_ids, generated_ids, text, prefill_tokens_per_s, decode_tokens_per_s} (several "
                  "prompts: lists with one entry per prompt)");
  cmd->add_option("--trace-routing", args->trace,
                  "write one JSON line per (token, MoE layer): {seq, pos, token, layer, experts, weights}");
  cmd->add_option("--stats", args->stats, "write per-layer expert load statistics as JSON");
  cmd->add_flag("--print-ids", args->print_ids, "also print the prompt and generated token ids");
  cmd->add_flag("--enforce-eager", args->enforce_eager, "run every decode step op by op instead of replaying its CUDA graph (--backend cuda; for debugging and profiling)");
  cmd->add_flag("--ep", args->ep,
                "expert parallelism under mpirun: every rank runs attention on all tokens, the MoE blocks split "
                "the experts over the ranks (CPU reference experts; with --backend cuda one GPU per rank over "
                "NCCL); rank 0 prints and writes the outputs, --stats adds each rank's work and bytes");
  cmd->add_option("--placement", args->placement,
                  "--ep: placement JSON (which experts each rank holds); default contiguous");
  cmd->add_option("--ep-transfer", args->ep_transfer,
                  "--ep: dispatch wire format f32 (exact; the CPU default), bf16 (the GPU default) or fp8")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
  cmd->add_option("--ep-combine", args->ep_combine,
                  "--ep: wire format of the partial sums sent back, bf16 (the GPU default) or f32 (the CPU's only "
                  "one; on GPUs the tokens then equal one GPU's up to fp32 addition order)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  const EplbFlags eplb =
      add_eplb_flags(*cmd, args->eplb, "--ep: ", "0: fixed; --stats then lists the epochs");
  for (CLI::Option* flag : {eplb.window, eplb.redundant, eplb.min_gain}) flag->needs(eplb.interval);
  return [args, temperature, top_p, top_k, seed] {
    args->has_temperature = temperature->count() > 0;
    args->has_top_p = top_p->count() > 0;
    args->has_top_k = top_k->count() > 0;
    args->has_seed = seed->count() > 0;
    run_generate(*args);
  };
}

}  // namespace moe::cli
