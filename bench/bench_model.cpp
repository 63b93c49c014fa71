// `moe bench --model DIR`: prefill and decode speed of a whole model on the CPU (fast experts), where the
// time goes (ModelOptions::times), and the floor from the bytes each decode step must read and the flops a
// prefill must do, against the read bandwidth and multiply rates measured in the same run.
// `moe bench --write-model DIR` writes the random-weight checkpoint it is usually run on: Qwen3-MoE's
// shape (hidden 2048, 32 heads / 4 KV heads of 128, 128 experts of 768, top 8) with fewer layers and a
// 32000 vocabulary, BF16, through our own checkpoint writer.
#include "bench/bench_model.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "moe/core/check.h"
#include "moe/core/checkpoint.h"
#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "cpu/ceilings.h"
#include "moe/model/causal_lm.h"
#include "moe/model/model_config.h"

namespace moe::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Uniform in [-a, a] with a = 0.02·√3 (std 0.02, transformers' initializer_range), as BF16; one
// independent generator per chunk so that the fill runs on every thread and the result does not depend on
// the thread count.
Tensor random_bf16(const std::vector<int64_t>& shape, uint64_t seed, float amplitude = 0.0346f) {
  Tensor t = Tensor::empty(DType::BF16, shape);
  auto* p = static_cast<uint16_t*>(t.data());
  constexpr int64_t kChunk = 1 << 20;
  const int64_t n = t.numel();
  ThreadPool::global().parallel_for((n + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t s = seed * 0x9e3779b97f4a7c15ull + uint64_t(c) * 0xbf58476d1ce4e5b9ull + 1;
      for (int64_t i = c * kChunk, end = std::min(n, (c + 1) * kChunk); i < end; ++i) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;                // xorshift64
        const float u = float(s >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        p[i] = f32_to_bf16((2 * u - 1) * amplitude);
      }
    }
  });
  return t;
}

Tensor ones_bf16(int64_t n) {
  Tensor t = Tensor::empty(DType::BF16, {n});
  std::fill_n(static_cast<uint16_t*>(t.data()), n, f32_to_bf16(1.0f));
  return t;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Phase {
  std::vector<double> seconds;  // per repeat
  model::ForwardTimes times;    // summed over repeats
};

void add_times(model::ForwardTimes& sum, const model::ForwardTimes& t) {
  for (double model::ForwardTimes::*part :
       {&model::ForwardTimes::embedding, &model::ForwardTimes::norms,
        &model::ForwardTimes::attention_projections, &model::ForwardTimes::attention_core,
        &model::ForwardTimes::attention_other, &model::ForwardTimes::moe, &model::ForwardTimes::dense_mlp,
        &model::ForwardTimes::lm_head, &model::ForwardTimes::total})
    sum.*part += t.*part;
}

void print_split(const char* name, const Phase& phase, int64_t tokens_per_repeat) {
  const model::ForwardTimes& t = phase.times;
  const double scale = 1e3 / double(phase.seconds.size()) / double(tokens_per_repeat);  // ms per token
  const double parts = t.embedding + t.norms + t.attention_projections + t.attention_core +
                       t.attention_other + t.moe + t.dense_mlp + t.lm_head;
  fmt::print(
      "  {} ms/token: attention projections {:.3f}, attention core {:.3f}, attention other {:.3f}, "
      "lm_head {:.3f}, norms+residual {:.3f}, embedding {:.3f}, MoE {:.3f}, dense MLP {:.3f}, rest {:.3f}, "
      "total {:.3f}\n",
      name, t.attention_projections * scale, t.attention_core * scale, t.attention_other * scale,
      t.lm_head * scale, t.norms * scale, t.embedding * scale, t.moe * scale, t.dense_mlp * scale,
      (t.total - parts) * scale, t.total * scale);
}

}  // namespace

std::string write_random_model(const std::filesystem::path& dir, int64_t layers) {
  constexpr int64_t H = 2048, heads = 32, kv_heads = 4, D = 128, E = 128, I = 768, V = 32000;
  const nlohmann::json config = {{"architectures", {"Qwen3MoeForCausalLM"}},
                                 {"model_type", "qwen3_moe"},
                                 {"hidden_size", H},
                                 {"num_hidden_layers", layers},
                                 {"num_attention_heads", heads},
                                 {"num_key_value_heads", kv_heads},
                                 {"head_dim", D},
                                 {"intermediate_size", 6144},
                                 {"moe_intermediate_size", I},
                                 {"num_experts", E},
                                 {"num_experts_per_tok", 8},
                                 {"norm_topk_prob", true},
                                 {"decoder_sparse_step", 1},
                                 {"mlp_only_layers", nlohmann::json::array()},
                                 {"vocab_size", V},
                                 {"max_position_embeddings", 32768},
                                 {"rms_norm_eps", 1e-6},
                                 {"rope_theta", 1e6},
                                 {"tie_word_embeddings", false},
                                 {"attention_bias", false},
                                 {"eos_token_id", 0},
                                 {"torch_dtype", "bfloat16"}};
  std::ofstream(dir / "config.json") << config.dump(2) << "\n";
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint64_t seed = 1;
  tensors.emplace_back("model.embed_tokens.weight", random_bf16({V, H}, seed++, 1.0f));
  tensors.emplace_back("lm_head.weight", random_bf16({V, H}, seed++));
  tensors.emplace_back("model.norm.weight", ones_bf16(H));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    tensors.emplace_back(p + "input_layernorm.weight", ones_bf16(H));
    tensors.emplace_back(p + "post_attention_layernorm.weight", ones_bf16(H));
    tensors.emplace_back(p + "self_attn.q_proj.weight", random_bf16({heads * D, H}, seed++));
    tensors.emplace_back(p + "self_attn.k_proj.weight", random_bf16({kv_heads * D, H}, seed++));
    tensors.emplace_back(p + "self_attn.v_proj.weight", random_bf16({kv_heads * D, H}, seed++));
    tensors.emplace_back(p + "self_attn.o_proj.weight", random_bf16({H, heads * D}, seed++));
    tensors.emplace_back(p + "self_attn.q_norm.weight", ones_bf16(D));
    tensors.emplace_back(p + "self_attn.k_norm.weight", ones_bf16(D));
    tensors.emplace_back(p + "mlp.gate.weight", random_bf16({E, H}, seed++));
    tensors.emplace_back(p + "mlp.experts.gate_up_proj", random_bf16({E, 2 * I, H}, seed++));
    tensors.emplace_back(p + "mlp.experts.down_proj", random_bf16({E, H, I}, seed++));
  }
  write_sharded_checkpoint(dir, tensors, uint64_t{2} << 30);
  return fmt::format("qwen3_moe, {} layers, hidden {}, {} experts of {}, vocab {}, bf16", layers, H, E, I, V);
}

void run_model_bench(const ModelBenchArgs& a) {
  const model::ModelConfig config = model::load_model_config(a.model);
  model::ForwardTimes times;
  model::ModelOptions options;
  options.cpu_experts = a.cpu_experts;
  options.cpu_weights = a.cpu_weights;
  options.times = &times;
  const auto load_start = Clock::now();
  auto lm = model::CausalLM::load(a.model, options);
  fmt::print("loaded {} ({}, {} layers) in {:.1f} s; {} threads\n", a.model.string(), config.model_type,
             config.num_layers, seconds_since(load_start), ThreadPool::global().size());

  // Bytes each decode step must read: every weight but the routed experts' (the embedding: one row), the
  // top-k routed experts of every MoE layer in their packed format, and the KV cache at the mean length.
  const Checkpoint checkpoint = Checkpoint::open(a.model);
  double dense_bytes = 0, dense_params = 0;
  for (const std::string& name : checkpoint.names()) {
    if (name.find(".experts.") != std::string::npos || name.find(".mlp.gate.") != std::string::npos) continue;
    if (name == "model.embed_tokens.weight" && !config.tie_word_embeddings) continue;
    const Tensor t = checkpoint.get(name);
    dense_bytes += double(t.nbytes());
    if (t.dim() == 2) dense_params += double(t.numel());
  }
  const MoeConfig& moe = config.moe;
  const int64_t moe_layers = static_cast<int64_t>(lm->info().moe_layers.size());
  const double expert_params = 3.0 * double(moe.hidden_size * moe.expert_intermediate_size);
  const double weight_bytes = a.cpu_weights == quant::WeightFormat::int8 ? 1.0 : 2.0;
  const double router_bytes = double(moe_layers) * double(moe.router.n_experts * moe.hidden_size) * 4.0;
  const double expert_bytes = double(moe_layers) * moe.router.top_k * expert_params * weight_bytes;
  const bool mla = config.attention == model::AttentionKind::mla;
  const double kv_floats = mla ? double(2 * config.kv_lora_rank + config.qk_rope_head_dim)
                               : double(2 * config.num_kv_heads * config.head_dim);
  const double mean_length = double(a.prompt_tokens) + double(a.decode_tokens) / 2;
  const double kv_bytes = double(config.num_layers) * mean_length * kv_floats * 4.0;
  const double decode_bytes = dense_bytes + router_bytes + expert_bytes + kv_bytes;

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(config.vocab_size - 1));
  Phase prefill, decode;
  for (int r = 0; r < a.repeats; ++r) {
    auto cache = lm->new_cache(1, a.prompt_tokens + a.decode_tokens);
    std::vector<std::vector<int32_t>> batch(1);
    for (int64_t i = 0; i < a.prompt_tokens; ++i) batch[0].push_back(token(rng));
    times = {};
    auto start = Clock::now();
    Tensor logits = lm->forward(batch, *cache, true);
    prefill.seconds.push_back(seconds_since(start));
    add_times(prefill.times, times);
    times = {};
    start = Clock::now();
    for (int64_t i = 0; i < a.decode_tokens; ++i) {
      const float* row = logits.data_as<float>();
      batch[0] = {static_cast<int32_t>(std::max_element(row, row + config.vocab_size) - row)};  // greedy
      logits = lm->forward(batch, *cache, true);
    }
    decode.seconds.push_back(seconds_since(start));
    add_times(decode.times, times);
  }

  // Ceilings after the timed runs (the same minute of a shared machine).
  const double read_bw = cpu::measure_read_bandwidth();
  const double fma_peak = cpu::measure_fp32_fma_peak();
  const double bf16_peak = cpu::measure_peak_flops(cpu::detect_isa(), a.cpu_weights);

  // Prefill flops: the dense weights once per token (lm_head only for the last), attention's QKᵀ and PV
  // over the causal triangle, the routed experts.
  const double P = double(a.prompt_tokens), V = double(config.vocab_size), H = double(config.hidden_size);
  const double lm_head_params = V * H;
  const double qk_width =
      mla ? double(config.kv_lora_rank + config.qk_rope_head_dim) : double(config.head_dim);
  const double v_width = mla ? double(config.kv_lora_rank) : double(config.head_dim);
  const double attention_flops =
      2.0 * double(config.num_layers) * double(config.num_heads) * P * (P + 1) / 2 * (qk_width + v_width);
  const double dense_flops =
      2.0 * P * (dense_params - lm_head_params) + 2.0 * lm_head_params + attention_flops;
  const double moe_flops = 2.0 * P * double(moe_layers) * moe.router.top_k * expert_params;
  const double prefill_floor = dense_flops / fma_peak + moe_flops / bf16_peak;
  const double decode_floor = decode_bytes / read_bw;

  const double prefill_s = median(prefill.seconds),
               decode_s = median(decode.seconds) / double(a.decode_tokens);
  fmt::print("prompt {} tokens, {} decode tokens, {} repeats (medians; every run: prefill", a.prompt_tokens,
             a.decode_tokens, a.repeats);
  for (double s : prefill.seconds) fmt::print(" {:.0f}", P / s);
  fmt::print(", decode");
  for (double s : decode.seconds) fmt::print(" {:.1f}", double(a.decode_tokens) / s);
  fmt::print(" tokens/s)\n");
  fmt::print(
      "prefill: {:.1f} tokens/s ({:.4g} s), floor {:.4g} s (dense+attention {:.1f} GFLOP at fp32 FMA {:.0f} "
      "GFLOP/s, experts {:.1f} GFLOP at {:.0f} GFLOP/s), ratio {:.2f}\n",
      P / prefill_s, prefill_s, prefill_floor, dense_flops / 1e9, fma_peak / 1e9, moe_flops / 1e9,
      bf16_peak / 1e9, prefill_s / prefill_floor);
  fmt::print(
      "decode: {:.2f} tokens/s ({:.4g} ms/token), floor {:.4g} ms ({:.0f} MB/token: dense {:.0f}, router "
      "{:.0f}, experts {:.0f}, KV {:.0f}; read {:.1f} GB/s), ratio {:.2f}\n",
      1.0 / decode_s, decode_s * 1e3, decode_floor * 1e3, decode_bytes / 1e6, dense_bytes / 1e6,
      router_bytes / 1e6, expert_bytes / 1e6, kv_bytes / 1e6, read_bw / 1e9, decode_s / decode_floor);
  print_split("prefill", prefill, a.prompt_tokens);
  print_split("decode", decode, a.decode_tokens);
}

}  // namespace moe::cli
