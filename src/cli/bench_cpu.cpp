// `moe bench --backend cpu`: the CPU layer (default experts path) over rotating inputs and rotating copies
// of the weights (so that weights come from DRAM, as in a real model), against ceilings measured in the
// same run: the read bandwidth of all threads over a 2 GiB buffer, and the vdpbf16ps peak (fp32 FMA peak
// where the CPU has no AVX512-BF16).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench.h"
#include "moe/core/thread_pool.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Bytes read per second by every pool thread summing its share of a 2 GiB buffer (best of 3).
double measure_read_bandwidth() {
  const int64_t n = (int64_t{2} << 30) / sizeof(float);
  std::vector<float> buffer(n, 1.0f);
  ThreadPool& pool = ThreadPool::global();
  std::vector<double> sums(pool.size());
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep)
    best = std::min(best, seconds_of([&] {
      const int64_t chunk = (n + pool.size() - 1) / pool.size();
      pool.parallel_for(pool.size(), 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          float lanes[16] = {};
          for (int64_t i = c * chunk; i + 16 <= std::min(n, (c + 1) * chunk); i += 16)
            for (int l = 0; l < 16; ++l) lanes[l] += buffer[i + l];
          double s = 0;
          for (float v : lanes) s += v;
          sums[c] = s;
        }
      });
    }));
  return double(n) * sizeof(float) / best;
}

// FLOP/s of 12 independent accumulator chains per thread: vdpbf16ps (2 FMAs per fp32 lane pair) where
// available, else fp32 FMA.
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_flops_per_thread(int64_t iterations) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3f80);
  const auto start = Clock::now();
  for (int64_t i = 0; i < iterations; ++i)
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  float lanes[16], sink = 0;
  for (auto& a : acc) {
    _mm512_storeu_ps(lanes, a);
    sink += lanes[0];
  }
  return (sink > 0 ? 1.0 : 0.0) * 12.0 * iterations * 64.0 / s;  // 32 pairs x 2 flops per instruction
}

__attribute__((target("avx2,fma"))) double fma_flops_per_thread(int64_t iterations) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-9f);
  const auto start = Clock::now();
  for (int64_t i = 0; i < iterations; ++i)
    for (auto& a : acc) a = _mm256_fmadd_ps(x, y, a);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  float lanes[8], sink = 0;
  for (auto& a : acc) {
    _mm256_storeu_ps(lanes, a);
    sink += lanes[0];
  }
  return (sink >= 0 ? 1.0 : 0.0) * 12.0 * iterations * 16.0 / s;
}

double measure_compute_peak() {
  ThreadPool& pool = ThreadPool::global();
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  std::vector<double> rates(pool.size());
  pool.parallel_for(pool.size(), 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rates[t] = bf16 ? dpbf16_flops_per_thread(20'000'000) : fma_flops_per_thread(20'000'000);
  });
  double total = 0;
  for (double r : rates) total += r;
  return total;
}

}  // namespace

std::vector<BenchRow> run_cpu_bench(const BenchShape& shape, const std::vector<int64_t>& tokens,
                                    BenchRouting routing, int repeats) {
  const double bandwidth = measure_read_bandwidth(), peak = measure_compute_peak();
  const MoeConfig config = bench_config(shape);
  // Enough weight copies that one forward's experts are not in the caches from the previous one.
  const double layer_bytes = 3.0 * config.hidden_size * config.expert_intermediate_size * 2.0 * config.router.n_experts;
  const int n_layers = static_cast<int>(std::clamp(std::ceil(256e6 / layer_bytes), 1.0, 4.0));
  std::vector<std::unique_ptr<MoeLayer>> layers;
  for (int l = 0; l < n_layers; ++l) {
    MoeWeights w = random_moe_weights(config, 1234 + l, DType::BF16);
    shape_router_for_routing(w, routing, 99);
    layers.push_back(std::make_unique<MoeLayer>(config, std::move(w)));
  }
  std::vector<BenchRow> rows;
  for (int64_t T : tokens) {
    std::vector<Tensor> inputs;
    for (int i = 0; i < 4; ++i) {
      Tensor x = random_tensor({T, config.hidden_size}, 1.0f, 500 + i);
      for (int64_t t = 0; t < T; ++t) x.data_as<float>()[t * config.hidden_size] = 1.0f;  // the routing feature
      inputs.push_back(x.to(DType::BF16));
    }
    double touched = 0;
    std::vector<double> us;
    for (int r = -2; r < repeats; ++r) {  // two warm-up runs
      MoeLayer& layer = *layers[(r + 2) % n_layers];
      LayerOutput out;
      const double s = seconds_of([&] { out = layer.forward(inputs[(r + 2) % inputs.size()]); });
      if (r < 0) continue;
      us.push_back(s * 1e6);
      touched += std::count_if(out.stats.tokens_per_expert.begin(), out.stats.tokens_per_expert.end(),
                               [](int64_t c) { return c > 0; });
    }
    std::sort(us.begin(), us.end());
    BenchRow row;
    row.shape = shape;
    row.tokens = T;
    row.backend = "cpu";
    row.routing = routing == BenchRouting::zipf ? "zipf" : "balanced";
    row.us_median = us[us.size() / 2];
    row.us_min = us[0];
    row.experts_touched = touched / repeats;
    row.matmul_tflops = peak / 1e12;
    row.copy_tbps = bandwidth / 1e12;
    finish_row(row);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace moe::cli
