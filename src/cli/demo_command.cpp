// moe demo: a DeepSeek-V3-shaped MoE layer with random weights at a size that runs in seconds, through
// both paradigms, with a routing and load report and the time taken.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "commands.h"
#include "validators.h"
#include "layer_cuda.h"
#include "core/thread_pool.h"
#include "cpu/fast_experts.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

struct DemoArgs {
  int64_t tokens = 512, hidden = 1024, intermediate = 256;
  double capacity_factor = 1.0;
  uint64_t seed = 1;
  std::string cpu_experts = "fast", cpu_weights = "bf16", backend = "cpu";
};

nlohmann::json deepseek_v3_config(const DemoArgs& a) {
  // DeepSeek-V3's routing exactly (256 experts in 8 groups, 4 groups kept, top-8, sigmoid + bias, scaling
  // 2.5, one shared expert); hidden and intermediate sizes scaled down from 7168 and 2048.
  return {{"model_type", "deepseek_v3"},  {"hidden_size", a.hidden},  {"moe_intermediate_size", a.intermediate},
          {"n_routed_experts", 256},      {"num_experts_per_tok", 8}, {"n_group", 8},
          {"topk_group", 4},              {"norm_topk_prob", true},   {"routed_scaling_factor", 2.5},
          {"n_shared_experts", 1},        {"hidden_act", "silu"},     {"topk_method", "noaux_tc"}};
}

void print_routing_report(const routing::LoadStats& s, int n_group) {
  std::vector<int64_t> sorted = s.tokens_per_expert;
  std::sort(sorted.begin(), sorted.end());
  fmt::print("routing ({} tokens x top-{} = {} pairs over {} experts)\n", s.n_tokens, s.top_k, s.n_tokens * s.top_k,
             s.n_experts);
  fmt::print("  pairs per expert: min {}  median {}  max {}  mean {:.1f}\n", sorted.front(),
             sorted[sorted.size() / 2], sorted.back(), s.mean_load);
  fmt::print("  max/mean {:.2f}   cv {:.3f}   normalized entropy {:.4f}   dead experts {}\n", s.max_over_mean, s.cv,
             s.normalized_entropy, s.dead_experts.size());
  std::vector<int> order(s.n_experts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return s.tokens_per_expert[a] > s.tokens_per_expert[b]; });
  fmt::print("  hottest experts:");
  for (int i = 0; i < 6; ++i) fmt::print(" #{} ({})", order[i], s.tokens_per_expert[order[i]]);
  fmt::print("\n  load per expert group (a group is {} experts):\n", s.n_experts / n_group);
  const int group_size = s.n_experts / n_group;
  std::vector<int64_t> group_load(n_group, 0);
  for (int e = 0; e < s.n_experts; ++e) group_load[e / group_size] += s.tokens_per_expert[e];
  const int64_t most = *std::max_element(group_load.begin(), group_load.end());
  for (int g = 0; g < n_group; ++g) {
    const int bar = most ? static_cast<int>(40.0 * group_load[g] / most + 0.5) : 0;
    fmt::print("    group {} {:>6} {}\n", g, group_load[g], std::string(bar, '#'));
  }
}

void run_demo(const DemoArgs& a) {
  MOE_CHECK(a.tokens >= 1 && a.hidden >= 1 && a.intermediate >= 1, "demo sizes must be positive");
  const MoeConfig config = parse_moe_config(deepseek_v3_config(a));
  MOE_CHECK(a.cpu_weights == "bf16" || a.cpu_experts == "fast",
            "--cpu-weights {} needs the fast CPU experts (drop --cpu-experts reference)", a.cpu_weights);
  const bool fast = a.cpu_experts == "fast";
  const LayerOptions base{.cpu_experts = fast ? CpuExperts::fast : CpuExperts::reference,
                          .cpu_weights = a.cpu_weights == "int8" ? quant::WeightFormat::int8 : quant::WeightFormat::bf16};
  if (a.backend == "cuda")
    fmt::print("moe demo: a DeepSeek-V3-shaped MoE layer with random BF16 weights on the GPU (bf16 experts)\n");
  else
    fmt::print("moe demo: a DeepSeek-V3-shaped MoE layer with random BF16 weights on the CPU, {} experts{}\n",
               fast ? "fast" : "reference",
               fast ? fmt::format(" ({} weights, {})", a.cpu_weights, cpu::isa_name(cpu::detect_isa())) : "");
  fmt::print("  {} routed experts in {} groups ({} kept), top-{}, sigmoid + correction bias (noaux_tc), scaling {}\n",
             config.router.n_experts, config.router.n_group, config.router.topk_group, config.router.top_k,
             config.router.routed_scaling_factor);
  fmt::print("  1 shared expert, hidden {}, expert intermediate {} (DeepSeek-V3: 7168, 2048), {} tokens, {} threads\n\n",
             config.hidden_size, config.expert_intermediate_size, a.tokens, ThreadPool::global().size());

  auto start = std::chrono::steady_clock::now();
  const MoeWeights weights = random_moe_weights(config, a.seed, DType::BF16, /*router_scale=*/1.0f);
  const Tensor x = random_tensor({a.tokens, config.hidden_size}, 1.0f, a.seed + 101);  // [T, H]
  const double setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  struct Run {
    std::string name;
    LayerOptions options;
    LayerOutput out;
  };
  auto with = [&](Paradigm paradigm, OverflowPolicy overflow) {
    LayerOptions o = base;
    o.paradigm = paradigm;
    o.capacity_factor = a.capacity_factor;
    o.overflow = overflow;
    return o;
  };
  std::vector<Run> runs = {
      {"contiguous", with(Paradigm::contiguous, OverflowPolicy::drop), {}},
      {"padded/drop", with(Paradigm::padded, OverflowPolicy::drop), {}},
      {"padded/renormalize", with(Paradigm::padded, OverflowPolicy::renormalize), {}},
  };
  for (Run& run : runs) {
    if (a.backend == "cuda") {
#if MOE_WITH_CUDA
      run.out = run_layer_cuda(config, weights, x, run.options);
#else
      MOE_FAIL("--backend cuda: this build has no CUDA backend (no nvcc at configure time); use --backend cpu");
#endif
    } else {
      run.out = MoeLayer(config, weights, run.options).forward(x);
    }
  }

  print_routing_report(runs[0].out.stats, config.router.n_group);
  fmt::print("\n{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}\n", "paradigm", "capacity", "dropped",
             "router", "prepare", "experts", "finalize", "shared", "total ms");
  for (const Run& run : runs) {
    const auto& t = run.out.timings;
    const auto& s = run.out.stats;
    fmt::print("{:<20} {:>8} {:>8} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>9.1f}\n", run.name,
               s.capacity < 0 ? std::string("-") : std::to_string(s.capacity), s.dropped_pairs, t.router_ms,
               t.prepare_ms, t.experts_ms, t.finalize_ms, t.shared_ms, t.total_ms());
  }

  // Tokens that lost no pair to the capacity limit must come out of the padded paradigm bit for bit equal.
  const int64_t T = a.tokens, H = config.hidden_size, k = config.router.top_k;
  const float* reference = runs[0].out.hidden_states.data_as<float>();
  const float* padded = runs[1].out.hidden_states.data_as<float>();
  const int64_t capacity = runs[1].out.stats.capacity;
  std::vector<int64_t> fill(config.router.n_experts, 0);
  int64_t intact = 0, mismatched = 0;
  for (int64_t t = 0; t < T; ++t) {
    bool kept_all = true;
    for (int64_t j = 0; j < k; ++j) kept_all &= fill[runs[0].out.topk.ids.data_as<int32_t>()[t * k + j]]++ < capacity;
    if (!kept_all) continue;
    ++intact;
    // NOTE: the CPU paths compute a row the same way in both layouts (bitwise equal); the GPU picks its
    // GEMM tiles by layout, so there the rows must agree to fp32 rounding.
    mismatched += !std::equal(reference + t * H, reference + (t + 1) * H, padded + t * H, [&](float u, float v) {
      return a.backend == "cpu" ? u == v : std::fabs(u - v) <= 1e-5f * (1.0f + std::fabs(u));
    });
  }
  fmt::print("\ncheck: {} of {} tokens kept every pair under capacity {}; {} of them differ from contiguous\n", intact,
             T, capacity, mismatched);
  fmt::print("setup (random weights) {:.0f} ms; total {:.0f} ms\n", setup_ms,
             setup_ms + runs[0].out.timings.total_ms() + runs[1].out.timings.total_ms() +
                 runs[2].out.timings.total_ms());
  MOE_CHECK(mismatched == 0, "the padded paradigm disagrees with the contiguous one on {} tokens", mismatched);

  if (base.cpu_weights == quant::WeightFormat::int8) {
    // The int8 weights' error against the bf16 fast path on the same input (normwise, relative).
    LayerOptions bf16 = base;
    bf16.cpu_weights = quant::WeightFormat::bf16;
    const Tensor want = MoeLayer(config, weights, bf16).forward(x).hidden_states;
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double d = double{reference[i]} - want.data_as<float>()[i];
      diff += d * d;
      norm += double{want.data_as<float>()[i]} * want.data_as<float>()[i];
    }
    fmt::print("int8 vs bf16 weights: normwise relative error {:.2e}\n", std::sqrt(diff / std::max(norm, 1e-300)));
  }
}

}  // namespace

Run add_demo_command(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand("demo", "Run a DeepSeek-V3-shaped MoE layer with random weights and report");
  cmd->add_option("--tokens", args->tokens, "tokens in the batch")->capture_default_str();
  cmd->add_option("--hidden", args->hidden, "hidden size")->capture_default_str();
  cmd->add_option("--intermediate", args->intermediate, "expert intermediate size")->capture_default_str();
  cmd->add_option("--capacity-factor", args->capacity_factor, "padded paradigm capacity factor")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "random seed")->capture_default_str();
  cmd->add_option("--backend", args->backend, "cpu, or cuda (the layer on the GPU; timings are whole forwards)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--cpu-experts", args->cpu_experts, "fast (the default) or reference (fp64-accumulated oracle)")
      ->check(CLI::IsMember({"fast", "reference"}))
      ->capture_default_str();
  cmd->add_option("--cpu-weights", args->cpu_weights, "fast experts' weights: bf16 or int8 (quantised at load)")
      ->check(CLI::IsMember({"bf16", "int8"}))
      ->capture_default_str();
  return [args] { run_demo(*args); };
}

}  // namespace moe::cli
