// cpu_moe_bench: one whole MoE layer on the CPU (router, prepare, fast experts with the fused finalize,
// shared experts) of a real model's shape, timed against the floor max(touched weight bytes / read
// bandwidth, flops / peak), with both ceilings measured in the same run (moe/cpu/ceilings.h). Weights are
// cold: the runs rotate over several layers whose expert weights together exceed the last-level cache
// many times, as a real model's layers do; each run's input differs, so do its touched experts. Memory is
// bounded (--max-gib): where a shape's layer would not fit (DeepSeek-V3: 256 × 88 MB), expert e aliases
// physical expert e mod P; the floor still counts every touched logical expert, as a real model streams each.
//
//   build/bin/cpu_moe_bench --backend cpu --shape qwen3-30b-a3b --tokens 1,8,32,128,512 [--routing zipf]
//       [--cpu-weights int8] [--layers N] [--json FILE]
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "moe/core/thread_pool.h"
#include "moe/cpu/ceilings.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"

namespace moe::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string backend = "cpu", shape = "qwen3-30b-a3b", tokens = "1,16,128", routing = "balanced", json;
  std::string cpu_weights = "bf16";
  int layers = 0;        // 0: enough to exceed the LLC several times, within max_gib
  double max_gib = 8.0;  // packed expert weights over all layers
  double min_seconds = 1.0;
  int min_reps = 5;
  uint64_t seed = 1;
};

struct Shape {
  std::string name;
  nlohmann::json config;
  int64_t H, I, E, k, shared_I;
};

Shape make_shape(const std::string& spec) {
  auto qwen3 = [](int64_t H, int64_t I, int64_t E, int64_t k) {
    return nlohmann::json{{"model_type", "qwen3_moe"}, {"hidden_size", H},         {"moe_intermediate_size", I},
                          {"num_experts", E},          {"num_experts_per_tok", k}, {"norm_topk_prob", true},
                          {"hidden_act", "silu"}};
  };
  if (spec == "qwen3-30b-a3b") return {spec, qwen3(2048, 768, 128, 8), 2048, 768, 128, 8, 0};
  if (spec == "mixtral-8x7b")
    return {spec,
            {{"model_type", "mixtral"}, {"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_local_experts", 8},
             {"num_experts_per_tok", 2}, {"hidden_act", "silu"}},
            4096, 14336, 8, 2, 0};
  if (spec == "olmoe-1b-7b")
    return {spec,
            {{"model_type", "olmoe"}, {"hidden_size", 2048}, {"intermediate_size", 1024}, {"num_experts", 64},
             {"num_experts_per_tok", 8}, {"norm_topk_prob", false}, {"hidden_act", "silu"}},
            2048, 1024, 64, 8, 0};
  if (spec == "deepseek-v3")
    return {spec,
            {{"model_type", "deepseek_v3"}, {"hidden_size", 7168}, {"moe_intermediate_size", 2048},
             {"n_routed_experts", 256}, {"num_experts_per_tok", 8}, {"n_group", 8}, {"topk_group", 4},
             {"norm_topk_prob", true}, {"routed_scaling_factor", 2.5}, {"n_shared_experts", 1},
             {"hidden_act", "silu"}, {"topk_method", "noaux_tc"}},
            7168, 2048, 256, 8, 2048};
  if (spec.starts_with("custom:")) {
    std::vector<int64_t> v;
    std::stringstream ss(spec.substr(7));
    for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoll(item));
    MOE_CHECK(v.size() == 4 && v[0] > 0 && v[1] > 0 && v[2] > 0 && v[3] > 0 && v[3] <= v[2],
              "--shape custom:H,I,E,k needs four positive sizes with k <= E, got '{}'", spec);
    return {spec, qwen3(v[0], v[1], v[2], v[3]), v[0], v[1], v[2], v[3], 0};
  }
  MOE_CHECK(false, "unknown --shape '{}': qwen3-30b-a3b, deepseek-v3, mixtral-8x7b, olmoe-1b-7b or custom:H,I,E,k",
            spec);
  return {};
}

// llama.cpp's MUL_MAT_ID on this machine class (issue 3): whole expert FFN, router excluded, 2 threads, cold
// weights, µs per layer, best run; {bf16, q8_0}.
double llama_us(const std::string& shape, int64_t T, bool int8) {
  static const std::map<std::pair<std::string, int64_t>, std::pair<double, double>> table = {
      {{"qwen3-30b-a3b", 1}, {1714, 1330}},    {{"qwen3-30b-a3b", 8}, {16152, 10835}},
      {{"qwen3-30b-a3b", 32}, {38856, 36696}}, {{"qwen3-30b-a3b", 512}, {320229, 418279}},
      {{"mixtral-8x7b", 1}, {20637, 12588}},   {{"mixtral-8x7b", 8}, {92669, 82900}},
      {{"mixtral-8x7b", 512}, {3.10e6, 3.63e6}},
  };
  const auto it = table.find({shape, T});
  return it == table.end() ? 0.0 : (int8 ? it->second.second : it->second.first);
}

std::vector<int64_t> parse_tokens(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    out.push_back(std::stoll(item));
    MOE_CHECK(out.back() >= 1, "--tokens values must be positive, got {}", out.back());
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// One layer's weights: `physical` distinct experts (expert e a view of physical e % physical); zipf routing
// adds log p_e (p_e ∝ 1 / rank, ranks shuffled) to expert e's logit through column 0, where every x holds 1.
MoeWeights bench_weights(const Shape& s, const MoeConfig& config, int64_t physical, uint64_t seed, bool zipf) {
  MoeWeights w;
  w.router = random_tensor({s.E, s.H}, 1.0f / std::sqrt(float(s.H)), seed, DType::F32);
  if (config.router_has_correction_bias) w.correction_bias = random_tensor({s.E}, 0.02f, seed + 1);
  if (zipf) {
    std::vector<int64_t> rank(s.E);
    std::iota(rank.begin(), rank.end(), 1);
    std::shuffle(rank.begin(), rank.end(), std::mt19937_64(seed));
    for (int64_t e = 0; e < s.E; ++e) w.router.data_as<float>()[e * s.H] = -std::log(double(rank[e]));
  }
  const float gate_std = 1.0f / std::sqrt(float(s.H)), down_std = 1.0f / std::sqrt(float(s.I));
  for (int64_t e = 0; e < s.E; ++e) {
    if (e < physical) {
      const uint64_t base = seed + 16 * (e + 1);
      w.experts.push_back({random_tensor({s.I, s.H}, gate_std, base + 1, DType::BF16),
                           random_tensor({s.I, s.H}, gate_std, base + 2, DType::BF16),
                           random_tensor({s.H, s.I}, down_std, base + 3, DType::BF16)});
    } else {
      w.experts.push_back(w.experts[e % physical]);
    }
  }
  if (s.shared_I)
    w.shared = {random_tensor({s.shared_I, s.H}, gate_std, seed + 7, DType::BF16),
                random_tensor({s.shared_I, s.H}, gate_std, seed + 8, DType::BF16),
                random_tensor({s.H, s.shared_I}, 1.0f / std::sqrt(float(s.shared_I)), seed + 9, DType::BF16)};
  return w;
}

void run_bench(const BenchArgs& a) {
  MOE_CHECK(a.backend == "cpu", "cpu_moe_bench: only --backend cpu, got '{}'", a.backend);
  const Shape s = make_shape(a.shape);
  const MoeConfig config = parse_moe_config(s.config);
  const bool int8 = a.cpu_weights == "int8";
  const bool zipf = a.routing == "zipf";
  const cpu::Isa isa = cpu::detect_isa();
  const int n_threads = ThreadPool::global().size();
  const std::vector<int64_t> token_counts = parse_tokens(a.tokens);

  // Footprint: packed weights of all layers within max_gib; enough layers (>= 1.5 GiB, about 6x the 260 MB
  // LLC of this machine) that each run's experts come from DRAM.
  const double bytes_per_param = int8 ? 1.0 : 2.0;
  const double expert_bytes = 3.0 * s.H * s.I * bytes_per_param;
  const double shared_bytes = 3.0 * s.H * s.shared_I * bytes_per_param;
  int layers = a.layers;
  if (layers <= 0)
    layers = static_cast<int>(std::clamp(std::ceil(1.5 * (1 << 30) / (expert_bytes * s.E + shared_bytes)), 2.0, 8.0));
  const int64_t physical =
      std::min<int64_t>(s.E, static_cast<int64_t>((a.max_gib * (1 << 30) / layers - shared_bytes) / expert_bytes));
  MOE_CHECK(physical >= 1, "--max-gib {} cannot hold one expert per layer for {} layers", a.max_gib, layers);

  fmt::print("cpu_moe_bench: {} (H {}, I {}, E {}, k {}{}), {} weights, {} routing, {} threads, ISA {}\n", s.name,
             s.H, s.I, s.E, s.k, s.shared_I ? fmt::format(", shared I {}", s.shared_I) : "", a.cpu_weights,
             a.routing, n_threads, cpu::isa_name(isa));
  fmt::print("  {} layers rotated, {} distinct experts each{} ({:.2f} GiB of packed expert weights)\n", layers,
             physical, physical < s.E ? fmt::format(" (expert e aliases e mod {})", physical) : "",
             layers * (physical * expert_bytes + shared_bytes) / (1 << 30));

  std::vector<std::unique_ptr<MoeLayer>> stack;
  const auto build_start = Clock::now();
  const LayerOptions options{.cpu_experts = CpuExperts::fast,
                             .cpu_weights = int8 ? cpu::WeightFormat::int8 : cpu::WeightFormat::bf16};
  for (int l = 0; l < layers; ++l)
    stack.push_back(
        std::make_unique<MoeLayer>(config, bench_weights(s, config, physical, a.seed + 1000 * l, zipf), options));
  fmt::print("  built and packed in {:.1f} s\n", std::chrono::duration<double>(Clock::now() - build_start).count());

  // NOTE: the ceilings are measured before and after the timed runs and the higher of each is used (the
  // stricter floor): on a shared machine either measurement alone may catch a slow minute.
  const cpu::WeightFormat format = int8 ? cpu::WeightFormat::int8 : cpu::WeightFormat::bf16;
  const double bandwidth_before = cpu::measure_read_bandwidth(), peak_before = cpu::measure_peak_flops(isa, format);

  struct Measured {
    int64_t T;
    std::vector<double> times, touched, router_ms, experts_ms;
    double max_over_mean;
  };
  std::vector<Measured> measured;
  for (const int64_t T : token_counts) {
    constexpr int kInputs = 4;  // distinct inputs: routing and touched experts change from run to run
    std::vector<Tensor> inputs;
    for (int i = 0; i < kInputs; ++i) {
      Tensor x = random_tensor({T, s.H}, 1.0f, a.seed + 77 * (i + 1) + T, DType::F32);  // [T, H]
      if (zipf)
        for (int64_t t = 0; t < T; ++t) x.data_as<float>()[t * s.H] = 1.0f;
      inputs.push_back(x);
    }
    std::vector<double> times, touched, router_ms, experts_ms;
    double max_over_mean = 0;
    const auto bench_start = Clock::now();
    for (int rep = -1;; ++rep) {
      const size_t index = static_cast<size_t>(rep + 1);
      MoeLayer& layer = *stack[index % stack.size()];
      const auto start = Clock::now();
      const LayerOutput out = layer.forward(inputs[index % inputs.size()]);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (rep < 0) continue;  // warm-up
      // NOTE: the floor counts every touched logical expert, as in a real model where each is distinct memory
      // (the kernels stream each logical expert's weights; aliasing only saves memory here).
      const auto n_touched = std::count_if(out.stats.tokens_per_expert.begin(), out.stats.tokens_per_expert.end(),
                                           [](int64_t c) { return c > 0; });
      const double bytes = n_touched * expert_bytes + shared_bytes;
      times.push_back(seconds);
      touched.push_back(bytes);
      router_ms.push_back(out.timings.router_ms + out.timings.prepare_ms);
      experts_ms.push_back(out.timings.experts_ms + out.timings.finalize_ms + out.timings.shared_ms);
      max_over_mean = std::max(max_over_mean, out.stats.max_over_mean);
      if (static_cast<int>(times.size()) >= a.min_reps &&
          std::chrono::duration<double>(Clock::now() - bench_start).count() >= a.min_seconds)
        break;
    }
    measured.push_back({T, times, touched, router_ms, experts_ms, max_over_mean});
  }
  const double bandwidth = std::max(bandwidth_before, cpu::measure_read_bandwidth());
  const double peak = std::max(peak_before, cpu::measure_peak_flops(isa, format));
  fmt::print("  ceilings ({} threads, best of before and after the runs): DRAM read {:.1f} GB/s (1 GiB buffer), {} peak "
             "{:.0f} GFLOP/s\n\n",
             n_threads, bandwidth / 1e9, isa == cpu::Isa::avx512 ? (int8 ? "vpdpbusd" : "vdpbf16ps") : "fp32 FMA",
             peak / 1e9);
  fmt::print("{:>6} {:>11} {:>10} {:>9} {:>7} {:>8} {:>10} {:>7} {:>9} {:>10}\n", "T", "us median", "spread %",
             "router us", "TFLOP/s", "GB/s", "floor us", "ratio", "llama us", "vs llama");
  nlohmann::json rows = nlohmann::json::array();
  for (const Measured& m : measured) {
    const int64_t T = m.T;
    const std::vector<double>& times = m.times;
    const double flops = 2.0 * T * s.k * 3 * s.H * s.I + 2.0 * T * 3 * s.H * s.shared_I;
    std::vector<double> floors;
    for (double bytes : m.touched) floors.push_back(std::max(bytes / bandwidth, flops / peak));
    const double us = median(times) * 1e6, floor_us = median(floors) * 1e6;
    const double router_us = median(m.router_ms) * 1e3;
    const double tflops = flops / (us * 1e-6) / 1e12;
    const double weight_bps = median(m.touched) / (us * 1e-6);
    const double llama = llama_us(s.name, T, int8);
    const auto [lo, hi] = std::minmax_element(times.begin(), times.end());
    fmt::print("{:>6} {:>11.0f} {:>4.0f}-{:<5.0f} {:>9.0f} {:>7.3f} {:>8.1f} {:>10.0f} {:>7.2f} {:>9} {:>10}\n", T, us,
               *lo * 1e6 / us * 100, *hi * 1e6 / us * 100, router_us, tflops, weight_bps / 1e9, floor_us, us / floor_us,
               llama > 0 ? fmt::format("{:.0f}", llama) : "-", llama > 0 ? fmt::format("{:.2f}x", llama / us) : "-");
    rows.push_back({{"shape", s.name},
                    {"H", s.H},
                    {"I", s.I},
                    {"E", s.E},
                    {"k", s.k},
                    {"tokens", T},
                    {"backend", "cpu"},
                    {"us_median", us},
                    {"tflops", tflops},
                    {"weight_tbps", weight_bps / 1e12},
                    {"floor_us", floor_us},
                    {"ratio_to_floor", us / floor_us},
                    {"us_min", *lo * 1e6},
                    {"us_max", *hi * 1e6},
                    {"reps", times.size()},
                    {"weights", a.cpu_weights},
                    {"isa", std::string(cpu::isa_name(isa))},
                    {"routing", a.routing},
                    {"threads", n_threads},
                    {"read_gbps", bandwidth / 1e9},
                    {"peak_gflops", peak / 1e9},
                    {"layers", layers},
                    {"distinct_experts_per_layer", physical},
                    {"max_over_mean_load", m.max_over_mean},
                    {"router_prepare_us_median", router_us},
                    {"llama_cpp_us", llama > 0 ? nlohmann::json(llama) : nlohmann::json(nullptr)}});
  }
  fmt::print("\nspread: fastest and slowest run as % of the median. floor = max(touched weight bytes / read "
             "bandwidth,\nflops / peak) per run, median over runs. llama.cpp: issue 3's figures (same machine class, "
             "router\nexcluded, best run); vs llama > 1 means faster than llama.cpp.\n");
  if (!a.json.empty()) {
    std::ofstream file(a.json);
    file << rows.dump(2) << "\n";
    MOE_CHECK(file.good(), "cannot write the JSON file '{}'", a.json);
  }
}

}  // namespace

}  // namespace moe::bench

int main(int argc, char** argv) {
  moe::bench::BenchArgs a;
  CLI::App app{"cpu_moe_bench: one MoE layer on the CPU against the machine's floor", "cpu_moe_bench"};
  app.add_option("--backend", a.backend, "backend")->check(CLI::IsMember({"cpu"}))->capture_default_str();
  app.add_option("--shape", a.shape, "qwen3-30b-a3b | deepseek-v3 | mixtral-8x7b | olmoe-1b-7b | custom:H,I,E,k")
      ->capture_default_str();
  app.add_option("--tokens", a.tokens, "comma-separated token counts")->capture_default_str();
  app.add_option("--routing", a.routing, "balanced (random router) or zipf (skewed towards few experts)")
      ->check(CLI::IsMember({"balanced", "zipf"}))
      ->capture_default_str();
  app.add_option("--json", a.json, "write the rows as JSON");
  app.add_option("--cpu-weights", a.cpu_weights, "bf16 or int8")
      ->check(CLI::IsMember({"bf16", "int8"}))
      ->capture_default_str();
  app.add_option("--layers", a.layers, "layers rotated (0: enough for cold weights)")->capture_default_str();
  app.add_option("--max-gib", a.max_gib, "bound on packed expert weights over all layers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--min-seconds", a.min_seconds, "time each T for at least this long")->capture_default_str();
  app.add_option("--min-reps", a.min_reps, "and at least this many runs")->capture_default_str();
  app.add_option("--seed", a.seed, "random seed")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    moe::bench::run_bench(a);
  } catch (const moe::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  return 0;
}
