// `moe bench --backend cpu`: one whole MoE layer on the CPU (router, prepare, fast experts with the fused
// finalize) of a model's shape, timed against the floor max(touched weight bytes / read bandwidth,
// flops / peak), with both ceilings measured in the same run (cpu/ceilings.h). Weights are cold: the
// runs rotate over several layers whose expert weights together exceed the last-level cache many times, as
// a real model's layers do; each run's input differs, so do its touched experts. Memory is bounded
// (--max-gib): where a shape's layers would not fit (DeepSeek-V3: 256 × 88 MB), expert e aliases physical
// expert e mod P; the floor still counts every touched logical expert, as a real model streams each.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "bench/bench.h"
#include "moe/core/check.h"
#include "core/thread_pool.h"
#include "cpu/ceilings.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

using Clock = std::chrono::steady_clock;

// llama.cpp's MUL_MAT_ID measured on a 2-core AVX-512 machine of this class (AVX512-BF16 and VNNI, DRAM read
// about 36 GB/s): whole expert FFN, router excluded, 2 threads, cold weights, µs per layer, best run;
// {bf16, q8_0}. 0 where not measured.
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

std::vector<double> scaled(std::vector<double> v, double factor) {
  for (double& x : v) x *= factor;
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// One layer's weights: `physical` distinct experts (expert e a view of physical e % physical), and the
// router of the requested routing (shape_router_for_routing; every bench input holds 1 in column 0).
MoeWeights bench_weights(const BenchShape& s, const MoeConfig& config, int64_t physical, BenchRouting routing,
                         uint64_t seed) {
  MoeWeights w;
  w.router = Tensor::empty(DType::F32, {s.n_experts, s.hidden});  // [E, H], drawn by shape_router_for_routing
  if (config.router_has_correction_bias) w.correction_bias = Tensor::zeros(DType::F32, {s.n_experts});  // [E]
  shape_router_for_routing(w, routing, seed);
  const float gate_std = 1.0f / std::sqrt(float(s.hidden)), down_std = 1.0f / std::sqrt(float(s.intermediate));
  for (int64_t e = 0; e < s.n_experts; ++e) {
    if (e < physical) {
      const uint64_t base = seed + 16 * (e + 1);
      w.experts.push_back({random_tensor({s.intermediate, s.hidden}, gate_std, base + 1, DType::BF16),   // [I, H]
                           random_tensor({s.intermediate, s.hidden}, gate_std, base + 2, DType::BF16),   // [I, H]
                           random_tensor({s.hidden, s.intermediate}, down_std, base + 3, DType::BF16)});  // [H, I]
    } else {
      w.experts.push_back(w.experts[e % physical]);
    }
  }
  return w;
}

struct Measured {
  std::vector<double> seconds, touched, router_prepare_ms;
  std::vector<double> run_read_bps, run_peak_flops;  // each run's ceilings (the higher of before and after)
  double max_over_mean = 0;
};

}  // namespace

std::vector<BenchRow> run_cpu_bench(const BenchShape& s, const std::vector<int64_t>& tokens,
                                    const CpuBenchOptions& o) {
  MOE_CHECK(o.weights == "bf16" || o.weights == "int8", "--cpu-weights '{}': use bf16 or int8", o.weights);
  MOE_CHECK(o.max_gib > 0, "--max-gib {}: must be positive", o.max_gib);
  MOE_CHECK(o.layers >= 0, "--layers {}: must be positive (or 0 for enough to exceed the cache)", o.layers);
  const MoeConfig config = bench_config(s);
  const bool int8 = o.weights == "int8";
  const quant::WeightFormat format = int8 ? quant::WeightFormat::int8 : quant::WeightFormat::bf16;
  const cpu::Isa isa = cpu::detect_isa();
  const int n_threads = ThreadPool::global().size();

  // Footprint: packed weights of all layers within max_gib; enough layers (>= 1.5 GiB, about 6x the 260 MB
  // LLC of the machine the llama.cpp figures come from) that each run's experts come from DRAM.
  const double expert_bytes = 3.0 * s.hidden * s.intermediate * (int8 ? 1.0 : 2.0);
  const int layers = o.layers > 0 ? o.layers
                                  : static_cast<int>(std::clamp(std::ceil(1.5 * (1 << 30) / (expert_bytes * s.n_experts)),
                                                                2.0, 8.0));
  const int64_t physical =
      std::min<int64_t>(s.n_experts, static_cast<int64_t>(o.max_gib * (1 << 30) / layers / expert_bytes));
  MOE_CHECK(physical >= 1, "--max-gib {} cannot hold one expert per layer for {} layers", o.max_gib, layers);

  fmt::print("moe bench --backend cpu: {} (H {}, I {}, E {}, k {}), {} weights, {} threads, ISA {}{}\n",
             s.name, s.hidden, s.intermediate, s.n_experts, s.top_k, o.weights, n_threads, cpu::isa_name(isa),
             isa != cpu::Isa::avx2
                 ? fmt::format(" ({})", cpu::stream_prefetch_name(cpu::detect_stream_prefetch()))
                 : "");
  if (isa == cpu::Isa::amx)
    fmt::print("  experts on AMX tiles; the floor's compute term stays the {} peak (the AVX-512 floor), which the "
               "tiles exceed many times, so compute-bound points run below 1x\n",
               int8 ? "vpdpbusd" : "vdpbf16ps");
  fmt::print("  {} layers rotated, {} distinct experts each{} ({:.2f} GiB of packed expert weights)\n", layers,
             physical, physical < s.n_experts ? fmt::format(" (expert e aliases e mod {})", physical) : "",
             layers * physical * expert_bytes / (1 << 30));
  std::vector<std::unique_ptr<MoeLayer>> stack;
  const auto build_start = Clock::now();
  const LayerOptions options{.cpu_experts = CpuExperts::fast, .cpu_weights = format};
  for (int l = 0; l < layers; ++l)
    stack.push_back(std::make_unique<MoeLayer>(config, bench_weights(s, config, physical, o.routing, o.seed + 1000 * l),
                                               options));
  fmt::print("  built and packed in {:.1f} s\n", std::chrono::duration<double>(Clock::now() - build_start).count());

  // NOTE: the ceilings are measured before and after the timed runs and the higher of each is used (the
  // stricter floor): on a shared machine either measurement alone may catch a slow minute. Between the runs
  // one pass of each pairs every run with the ceilings of its own minute (the paired ratio).
  cpu::ReadProbe probe;
  const double bandwidth_before = probe.measure(3), peak_before = cpu::measure_peak_flops(isa, format);
  std::vector<Measured> measured;
  for (const int64_t T : tokens) {
    constexpr int kInputs = 4;  // distinct inputs: routing and touched experts change from run to run
    std::vector<Tensor> inputs;
    for (int i = 0; i < kInputs; ++i) {
      Tensor x = random_tensor({T, s.hidden}, 1.0f, o.seed + 77 * (i + 1) + T, DType::F32);  // [T, H]
      for (int64_t t = 0; t < T; ++t) x.data_as<float>()[t * s.hidden] = 1.0f;             // the routing feature
      inputs.push_back(x);
    }
    Measured m;
    const auto bench_start = Clock::now();
    double bandwidth_last = 0, peak_last = 0;  // the ceilings measured after the previous run
    for (int rep = -1;; ++rep) {  // one warm-up run
      const size_t index = static_cast<size_t>(rep + 1);
      MoeLayer& layer = *stack[index % stack.size()];
      const auto start = Clock::now();
      const LayerOutput out = layer.forward(inputs[index % inputs.size()]);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const double bandwidth = probe.measure(1), peak = cpu::measure_peak_flops(isa, format, 1);
      const double bandwidth_before_run = bandwidth_last, peak_before_run = peak_last;
      bandwidth_last = bandwidth;
      peak_last = peak;
      if (rep < 0) continue;
      m.run_read_bps.push_back(std::max(bandwidth_before_run, bandwidth));
      m.run_peak_flops.push_back(std::max(peak_before_run, peak));
      // NOTE: every touched logical expert counts, as in a real model where each is distinct memory (the
      // kernels stream each logical expert's weights; aliasing only saves memory here).
      m.touched.push_back(static_cast<double>(std::count_if(out.stats.tokens_per_expert.begin(),
                                                            out.stats.tokens_per_expert.end(),
                                                            [](int64_t c) { return c > 0; })));
      m.seconds.push_back(seconds);
      m.router_prepare_ms.push_back(out.timings.router_ms + out.timings.prepare_ms);
      m.max_over_mean = std::max(m.max_over_mean, out.stats.max_over_mean);
      if (static_cast<int>(m.seconds.size()) >= o.repeats &&
          std::chrono::duration<double>(Clock::now() - bench_start).count() >= o.min_seconds)
        break;
    }
    measured.push_back(std::move(m));
  }
  const double bandwidth_after = probe.measure(3), peak_after = cpu::measure_peak_flops(isa, format);

  std::vector<BenchRow> rows;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Measured& m = measured[i];
    BenchRow row;
    row.shape = s;
    row.tokens = tokens[i];
    row.backend = "cpu";
    row.routing = o.routing == BenchRouting::zipf ? "zipf" : "balanced";
    row.weights = o.weights;
    row.us_median = median(m.seconds) * 1e6;
    row.us_min = *std::min_element(m.seconds.begin(), m.seconds.end()) * 1e6;
    // NOTE: the floor is monotone in the touched bytes, so the floor of the median run is the median floor.
    row.experts_touched = median(m.touched);
    row.matmul_tflops = std::max(peak_before, peak_after) / 1e12;
    row.copy_tbps = std::max(bandwidth_before, bandwidth_after) / 1e12;
    if (const double llama = llama_us(s.name, tokens[i], int8); llama > 0) {
      row.peer = "llama.cpp";
      row.peer_us = llama;
    }
    std::vector<double> run_ratio;
    for (size_t r = 0; r < m.seconds.size(); ++r)
      run_ratio.push_back(m.seconds[r] * 1e6 /
                          floor_us(s, tokens[i], m.touched[r], o.weights, m.run_peak_flops[r], m.run_read_bps[r]));
    row.cpu = BenchRow::CpuDetails{
        .isa = std::string(cpu::isa_name(isa)),
        .threads = n_threads,
        .layers = layers,
        .reps = static_cast<int>(m.seconds.size()),
        .distinct_experts = physical,
        .us_max = *std::max_element(m.seconds.begin(), m.seconds.end()) * 1e6,
        .router_prepare_us = median(m.router_prepare_ms) * 1e3,
        .max_over_mean_load = m.max_over_mean,
        .read_gbps_before = bandwidth_before / 1e9,
        .read_gbps_after = bandwidth_after / 1e9,
        .peak_gflops_before = peak_before / 1e9,
        .peak_gflops_after = peak_after / 1e9,
        .run_us = scaled(m.seconds, 1e6),
        .run_experts_touched = m.touched,
        .run_read_gbps = scaled(m.run_read_bps, 1e-9),
        .run_peak_gflops = scaled(m.run_peak_flops, 1e-9),
        .run_ratio = run_ratio,
        .ratio_paired = median(run_ratio),
    };
    finish_row(row);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace moe::cli
