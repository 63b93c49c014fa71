// `moe bench --model DIR --backend cuda`: the whole decoder on the GPU (engine/cuda_model.h). Per batch size
// B: B random prompts of --prompt-tokens prefilled in one forward, then --decode-tokens greedy steps of all B
// at once, each token chosen on the device; the times are wall clock over forwards that end in reading the
// chosen ids (the step's only host synchronisation), after a warm-up run of the same batch. A profiling
// pass after the timed ones gives the time of each part. The decode roofline is the
// bytes a step must read over the device copy bandwidth measured in the same run: every weight but the
// routed experts' (bf16; the embedding: one row per token), the routers (fp32), the experts B tokens touch
// (E · (1 - (1 - k/E)^B) per layer for uniform routing; the random checkpoints route about so) and the KV
// cache (fp32) at the mean length.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "bench/bench.h"
#include "bench/bench_model.h"
#include "cuda/check.h"
#include "engine/cuda_model.h"
#include "moe/core/checkpoint.h"
#include "moe/model/model_config.h"

namespace moe::cli {

namespace {

void clear_parts(model::ForwardTimes& t) {
  std::function<void()> fence = std::move(t.fence);
  t = {};
  t.fence = std::move(fence);
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct RunTimes {
  double prefill = 0, decode = 0;  // seconds
};

// One prefill of `batch` prompts and decode_tokens greedy steps of them all in `cache` (emptied after), the
// tokens chosen where the logits are (only the ids come back). NOTE: the runs of a batch size share one
// cache, as a server's steps do, so that the decode steps replay the recordings made for it. With `parts` (a profiling pass, its fence set), *parts holds the
// decode steps' parts and *prefill_parts the prefill's.
RunTimes run_once(model::CausalLM& lm, model::KvCache& cache, int64_t prompt, int64_t decode, std::mt19937& rng,
                  model::ForwardTimes* parts = nullptr, model::ForwardTimes* prefill_parts = nullptr) {
  const int64_t V = lm.info().vocab_size, batch = cache.num_sequences();
  std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(V - 1));
  std::vector<std::vector<int32_t>> tokens(batch);
  for (auto& t : tokens)
    for (int64_t i = 0; i < prompt; ++i) t.push_back(token(rng));
  const std::vector<model::TokenChoice> greedy(batch);
  RunTimes times;
  auto start = Clock::now();
  std::vector<int32_t> next = lm.forward_sample(tokens, cache, greedy);  // [batch]
  times.prefill = seconds_since(start);
  if (parts) {
    *prefill_parts = *parts;
    clear_parts(*parts);
  }
  start = Clock::now();
  for (int64_t step = 0; step < decode; ++step) {
    for (int64_t s = 0; s < batch; ++s) tokens[s] = {next[s]};
    next = lm.forward_sample(tokens, cache, greedy);
  }
  times.decode = seconds_since(start);
  for (int64_t s = 0; s < batch; ++s) cache.release(s);
  return times;
}

// The parts of a forward (ms), per forward over `forwards`.
std::string parts_line(const model::ForwardTimes& t, double forwards) {
  const auto ms = [&](double s) { return s * 1e3 / forwards; };
  return fmt::format(
      "attention {:.3f} (projections {:.3f}, core {:.3f}, other {:.3f}), MoE {:.3f}, dense MLP {:.3f}, norms "
      "{:.3f}, embedding {:.3f}, lm_head {:.3f}, sampling {:.3f}; total {:.3f}",
      ms(t.attention_projections + t.attention_core + t.attention_other), ms(t.attention_projections),
      ms(t.attention_core), ms(t.attention_other), ms(t.moe), ms(t.dense_mlp), ms(t.norms), ms(t.embedding),
      ms(t.lm_head), ms(t.sampling), ms(t.total));
}

}  // namespace

void run_model_bench_cuda(const ModelBenchArgs& a) {
  const model::ModelConfig config = model::load_model_config(a.model);
  const auto load_start = Clock::now();
  model::ForwardTimes parts;
  const auto lm = engine::load_cuda_causal_lm(a.model, cuda_bench_options(a, &parts));
  fmt::print("loaded {} ({}, {} layers) on the GPU in {:.1f} s\n", a.model.string(), config.model_type,
             config.num_layers, seconds_since(load_start));
  const Checkpoint checkpoint = Checkpoint::open(a.model);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const std::string& name : checkpoint.names()) shapes[name] = checkpoint.get(name).shape();
  time_model_cuda(*lm, config, dense_weight_bytes(config, shapes), a, parts);
}

model::ModelOptions cuda_bench_options(const ModelBenchArgs& a, model::ForwardTimes* parts) {
  model::ModelOptions options;
  options.times = parts;
  options.enforce_eager = a.enforce_eager;
  options.max_batched_tokens =
      std::max<int64_t>(4096, *std::max_element(a.batches.begin(), a.batches.end()) * a.prompt_tokens);
  return options;
}

double dense_weight_bytes(const model::ModelConfig& config,
                          const std::map<std::string, std::vector<int64_t>>& shapes) {
  double bytes = 0;  // bf16 on the device, whatever the checkpoint's dtype
  for (const auto& [name, shape] : shapes) {
    if (name.find(".experts.") != std::string::npos || name.find(".mlp.gate.") != std::string::npos) continue;
    if (name == "model.embed_tokens.weight" && !config.tie_word_embeddings) continue;
    double n = 1;
    for (const int64_t d : shape) n *= double(d);
    bytes += 2.0 * n;
  }
  return bytes;
}

void time_model_cuda(model::CausalLM& lm, const model::ModelConfig& config, double dense_bytes,
                     const ModelBenchArgs& a, model::ForwardTimes& parts) {
  const MoeConfig& moe = config.moe;
  const auto moe_layers = static_cast<double>(lm.info().moe_layers.size());
  const double E = double(moe.router.n_experts), k = double(moe.router.top_k);
  const double expert_bytes = 2.0 * 3.0 * double(moe.hidden_size * moe.expert_intermediate_size);
  const double router_bytes = moe_layers * E * double(moe.hidden_size) * 4.0;
  const bool mla = config.attention == model::AttentionKind::mla;
  const double kv_floats = mla ? double(2 * config.kv_lora_rank + config.qk_rope_head_dim)
                               : double(2 * config.num_kv_heads * config.head_dim);
  const double mean_length = double(a.prompt_tokens) + double(a.decode_tokens) / 2;
  const double copy_tbps = device_copy_tbps();
  fmt::print("device copy bandwidth {:.2f} TB/s (read + write)\n", copy_tbps);
  fmt::print("{:>6} {:>14} {:>14} {:>12} {:>16} {:>10}\n", "batch", "prefill tok/s", "decode tok/s",
             "ms/step", "roofline tok/s", "of roofline");
  std::mt19937 rng(1);
  std::vector<std::string> part_lines;
  for (const int64_t B : a.batches) {
    const auto cache = lm.new_cache(B, a.prompt_tokens + a.decode_tokens);
    run_once(lm, *cache, a.prompt_tokens, 2, rng);  // warm-up: cuBLASLt plans, the memory pool, the recording
    std::vector<double> prefill, decode;
    for (int r = 0; r < a.repeats; ++r) {
      const RunTimes t = run_once(lm, *cache, a.prompt_tokens, a.decode_tokens, rng);
      prefill.push_back(t.prefill);
      decode.push_back(t.decode);
    }
    std::sort(prefill.begin(), prefill.end());
    std::sort(decode.begin(), decode.end());
    const double prefill_s = prefill[prefill.size() / 2],
                 step_s = decode[decode.size() / 2] / double(a.decode_tokens);
    const double touched = E * (1.0 - std::pow(1.0 - k / E, double(B)));
    const double step_bytes = dense_bytes + router_bytes + moe_layers * touched * expert_bytes +
                              double(config.num_layers) * double(B) * mean_length * kv_floats * 4.0;
    const double roofline = double(B) / (step_bytes / (copy_tbps * 1e12));
    fmt::print("{:>6} {:>14.0f} {:>14.1f} {:>12.3f} {:>16.0f} {:>9.1f}%\n", B,
               double(B * a.prompt_tokens) / prefill_s, double(B) / step_s, step_s * 1e3, roofline,
               100.0 * double(B) / step_s / roofline);
    // The profiling pass: the device synchronised around every part, so each part's time is its own.
    parts.fence = [] { MOE_CUDA_CHECK(cudaDeviceSynchronize()); };
    clear_parts(parts);
    model::ForwardTimes prefill_parts;
    run_once(lm, *cache, a.prompt_tokens, a.decode_tokens, rng, &parts, &prefill_parts);
    part_lines.push_back(fmt::format("batch {} prefill: {}", B, parts_line(prefill_parts, 1)));
    part_lines.push_back(
        fmt::format("batch {} decode step: {}", B, parts_line(parts, double(a.decode_tokens))));
    parts = {};
  }
  fmt::print("decode steps: {}\n", a.enforce_eager ? std::string("op by op (--enforce-eager)")
                                                   : fmt::format("CUDA graphs, {} buckets recorded", lm.recorded_decode_steps()));
  fmt::print("parts (ms; a profiling pass, op by op, with the device synchronised around each part):\n");
  for (const std::string& line : part_lines) fmt::print("  {}\n", line);
}

}  // namespace moe::cli
