#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

#include "bench/bench.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

const std::vector<BenchShape>& named_shapes() {
  static const std::vector<BenchShape> shapes = {
      {"qwen3-30b-a3b", 2048, 768, 128, 8},
      {"deepseek-v3", 7168, 2048, 256, 8},
      {"mixtral-8x7b", 4096, 14336, 8, 2},
      {"olmoe-1b-7b", 2048, 1024, 64, 8},
  };
  return shapes;
}

}  // namespace

BenchShape parse_bench_shape(const std::string& text) {
  for (const BenchShape& s : named_shapes())
    if (s.name == text) return s;
  if (text.rfind("custom:", 0) == 0) {
    BenchShape s{text, 0, 0, 0, 0};
    std::istringstream in(text.substr(7));
    char c1 = 0, c2 = 0, c3 = 0;
    in >> s.hidden >> c1 >> s.intermediate >> c2 >> s.n_experts >> c3 >> s.top_k;
    MOE_CHECK(!in.fail() && in.eof() && c1 == ',' && c2 == ',' && c3 == ',' && s.hidden > 0 && s.intermediate > 0 &&
                  s.n_experts > 0 && s.top_k > 0 && s.top_k <= s.n_experts,
              "--shape '{}': custom shapes are custom:H,I,E,k with positive sizes and k <= E", text);
    return s;
  }
  std::string known;
  for (const BenchShape& s : named_shapes()) known += s.name + ", ";
  MOE_FAIL("unknown --shape '{}': use one of {}or custom:H,I,E,k", text, known);
}

MoeConfig bench_config(const BenchShape& s) {
  nlohmann::json c = {{"hidden_size", s.hidden}, {"num_experts_per_tok", s.top_k}, {"hidden_act", "silu"}};
  if (s.name == "deepseek-v3") {
    c.update({{"model_type", "deepseek_v3"}, {"n_routed_experts", s.n_experts},
              {"moe_intermediate_size", s.intermediate}, {"n_shared_experts", 0}});
  } else if (s.name == "mixtral-8x7b") {
    c.update({{"model_type", "mixtral"}, {"num_local_experts", s.n_experts}, {"intermediate_size", s.intermediate}});
  } else if (s.name == "olmoe-1b-7b") {
    c.update({{"model_type", "olmoe"}, {"num_experts", s.n_experts}, {"intermediate_size", s.intermediate}});
  } else {  // Qwen3-MoE's router for qwen3 and custom shapes
    c.update({{"model_type", "qwen3_moe"}, {"num_experts", s.n_experts}, {"moe_intermediate_size", s.intermediate},
              {"norm_topk_prob", true}});
  }
  return parse_moe_config(c);
}

void shape_router_for_routing(MoeWeights& w, BenchRouting routing, uint64_t seed) {
  const int64_t E = w.router.size(0), H = w.router.size(1);
  w.router = random_tensor({E, H}, 1.0f / std::sqrt(float(H)), seed);
  float* g = w.router.data_as<float>();
  for (int64_t e = 0; e < E; ++e) {
    // NOTE: feature 0 of every bench input is 1, so column 0 is a per-expert logit offset.
    const double rank = static_cast<double>((e * 37) % E);  // a fixed shuffle: hot experts spread over groups
    g[e * H] = routing == BenchRouting::zipf ? static_cast<float>(std::log(1.0 / (rank + 1.0))) : 0.0f;
  }
  if (w.correction_bias.defined()) std::fill_n(w.correction_bias.data_as<float>(), E, 0.0f);
}

namespace {
double layer_flops(const BenchShape& s, int64_t tokens) {
  return 2.0 * tokens * s.top_k * 3.0 * s.hidden * s.intermediate;
}
double weight_bytes(const BenchShape& s, double experts_touched, const std::string& weights) {
  // int4: half a byte a weight and a 4-byte scale and zero point per 128 (the GPU's tiles)
  const double per_weight = weights == "int8" || weights == "fp8" ? 1.0 : weights == "int4" ? 0.5 + 4.0 / 128 : 2.0;
  return experts_touched * 3.0 * s.hidden * s.intermediate * per_weight;
}
}  // namespace

double floor_us(const BenchShape& shape, int64_t tokens, double experts_touched, const std::string& weights,
                double peak_flops, double read_bytes_per_s) {
  return std::max(layer_flops(shape, tokens) / peak_flops,
                  weight_bytes(shape, experts_touched, weights) / read_bytes_per_s) * 1e6;
}

void finish_row(BenchRow& r) {
  r.tflops = layer_flops(r.shape, r.tokens) / (r.us_median * 1e-6) / 1e12;
  r.weight_tbps = weight_bytes(r.shape, r.experts_touched, r.weights) / (r.us_median * 1e-6) / 1e12;
  r.floor_us = floor_us(r.shape, r.tokens, r.experts_touched, r.weights, r.matmul_tflops * 1e12, r.copy_tbps * 1e12);
  r.ratio_to_floor = r.us_median / r.floor_us;
}

nlohmann::json to_json(const BenchRow& r) {
  nlohmann::json j = {{"shape", r.shape.name},
                      {"H", r.shape.hidden},
                      {"I", r.shape.intermediate},
                      {"E", r.shape.n_experts},
                      {"k", r.shape.top_k},
                      {"tokens", r.tokens},
                      {"backend", r.backend},
                      {"routing", r.routing},
                      {"us_median", r.us_median},
                      {"us_min", r.us_min},
                      {"tflops", r.tflops},
                      {"weight_tbps", r.weight_tbps},
                      {"floor_us", r.floor_us},
                      {"ratio_to_floor", r.ratio_to_floor},
                      {"experts_touched", r.experts_touched},
                      {"matmul_tflops", r.matmul_tflops},
                      {"copy_tbps", r.copy_tbps}};
  if (!r.peer.empty()) j["peer"] = {{"name", r.peer}, {"us", r.peer_us}};
  j["weights"] = r.weights;
  if (!r.path.empty()) j["path"] = r.path;
  if (r.cpu) {
    const BenchRow::CpuDetails& c = *r.cpu;
    j.update({{"isa", c.isa},
              {"threads", c.threads},
              {"layers", c.layers},
              {"distinct_experts_per_layer", c.distinct_experts},
              {"reps", c.reps},
              {"us_max", c.us_max},
              {"router_prepare_us_median", c.router_prepare_us},
              {"max_over_mean_load", c.max_over_mean_load},
              {"read_gbps", r.copy_tbps * 1e3},
              {"peak_gflops", r.matmul_tflops * 1e3},
              {"ceilings_before", {{"read_gbps", c.read_gbps_before}, {"peak_gflops", c.peak_gflops_before}}},
              {"ceilings_after", {{"read_gbps", c.read_gbps_after}, {"peak_gflops", c.peak_gflops_after}}},
              {"ratio_to_floor_paired", c.ratio_paired},
              {"runs", {{"us", c.run_us},
                        {"experts_touched", c.run_experts_touched},
                        {"read_gbps", c.run_read_gbps},
                        {"peak_gflops", c.run_peak_gflops},
                        {"ratio_to_floor", c.run_ratio}}}});
  }
  return j;
}

void print_rows(const std::vector<BenchRow>& rows) {
  fmt::print("{:<15} {:>6} {:>8} {:>7} {:>10} {:>8} {:>8} {:>9} {:>7}\n", "shape", "tokens", "routing", "backend",
             "us_median", "TFLOP/s", "TB/s", "floor us", "xfloor");
  for (const BenchRow& r : rows)
    fmt::print("{:<15} {:>6} {:>8} {:>7} {:>10.1f} {:>8.3f} {:>8.3f} {:>9.1f} {:>7.2f}\n", r.shape.name, r.tokens,
               r.routing, !r.cpu && r.weights != "bf16" ? r.backend + "/" + r.weights : r.backend, r.us_median,
               r.tflops, r.weight_tbps, r.floor_us, r.ratio_to_floor);
  if (rows.empty()) return;
  if (!rows[0].cpu) {
    fmt::print("ceilings measured in this run: matmul {:.0f} TFLOP/s, copy {:.2f} TB/s\n", rows[0].matmul_tflops,
               rows[0].copy_tbps);
    for (const BenchRow& r : rows) {
      if (r.path.empty()) continue;
      const std::string vs =
          r.peer.empty() ? "" : fmt::format(" ({:.2f}x the time of {})", r.us_median / r.peer_us, r.peer);
      fmt::print("  T={} {}: {}{}\n", r.tokens, r.weights, r.path, vs);
    }
    return;
  }
  // NOTE: the CPU's ceilings are small numbers: GB/s and GFLOP/s, per row (each keeps the stricter floor).
  fmt::print("\n{:>6} {:>7} {:>10} {:>9} {:>9} {:>11} {:>8} {:>10} {:>10}\n", "tokens", "weights", "spread %",
             "router us", "read GB/s", "peak GFLOP/s", "paired", "peer us", "vs peer");
  for (const BenchRow& r : rows) {
    const BenchRow::CpuDetails& c = *r.cpu;
    fmt::print("{:>6} {:>7} {:>4.0f}-{:<5.0f} {:>9.0f} {:>9.1f} {:>11.0f} {:>8.2f} {:>10} {:>10}\n", r.tokens,
               r.weights, r.us_min / r.us_median * 100, c.us_max / r.us_median * 100, c.router_prepare_us,
               r.copy_tbps * 1e3, r.matmul_tflops * 1e3, c.ratio_paired,
               r.peer.empty() ? "-" : fmt::format("{:.0f}", r.peer_us),
               r.peer.empty() ? "-" : fmt::format("{:.2f}x", r.peer_us / r.us_median));
  }
  fmt::print("\nspread: fastest and slowest run as % of the median. floor = max(touched weight bytes / read "
             "bandwidth,\nflops / peak), ceilings measured before and after the timed runs, the higher of each "
             "kept.\npaired: the median over runs of each run's time over its own floor, from the ceilings "
             "measured\nright before and after it (the higher of each).\npeer: {} (measured on a 2-core "
             "AVX-512 machine of this class: 2 threads, cold weights, router excluded, best run); vs peer > 1: "
             "faster than it.\n",
             "llama.cpp MUL_MAT_ID");
}

}  // namespace moe::cli
