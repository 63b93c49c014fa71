// llama.cpp's MoE expert path (ggml MUL_MAT_ID on the CPU backend, as llama.cpp's build_moe_ffn builds it:
// gate and up by expert, SwiGLU, down by expert, times the routing weights, summed over the k choices),
// timed per layer on the shapes of `moe bench`, for the side-by-side with the CPU experts. Written against ggml's
// public API (ggml.h, ggml-cpu.h of the llama-cpp-python package); scripts/peers/llama_peer.sh builds it.
//
// Usage: llama_moe_peer SHAPE TOKENS TYPE THREADS REPEATS
//   SHAPE: qwen3-30b-a3b, mixtral-8x7b, olmoe-1b-7b or H,I,E,k; TOKENS: comma list; TYPE: bf16 or q8_0.
// Cold weights as in `moe bench --backend cpu`: layers rotated (>= 1.5 GiB of expert weights, 2 to 8
// layers), four inputs with their own random routing (k distinct experts a token, uniformly).
// Prints one line per T: shape T type us_median us_min touched_experts weight_GBps.
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Shape {
  std::string name;
  int64_t H, I, E, k;
};

Shape parse_shape(const std::string& s) {
  if (s == "qwen3-30b-a3b") return {s, 2048, 768, 128, 8};
  if (s == "mixtral-8x7b") return {s, 4096, 14336, 8, 2};
  if (s == "olmoe-1b-7b") return {s, 2048, 1024, 64, 8};
  Shape shape{s, 0, 0, 0, 0};
  if (std::sscanf(s.c_str(), "%ld,%ld,%ld,%ld", &shape.H, &shape.I, &shape.E, &shape.k) != 4 || shape.k > shape.E) {
    std::fprintf(stderr, "unknown shape '%s' (qwen3-30b-a3b, mixtral-8x7b, olmoe-1b-7b or H,I,E,k)\n", s.c_str());
    std::exit(2);
  }
  return shape;
}

// Random weights of `type` for a [cols, rows, experts] tensor (ggml order: cols = the reduction).
void fill(ggml_tensor* t, ggml_type type, std::mt19937& rng) {
  const int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2];
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  std::vector<float> row(cols);
  const size_t row_bytes = ggml_row_size(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = normal(rng);
    char* dst = static_cast<char*>(t->data) + r * row_bytes;
    if (type == GGML_TYPE_BF16)
      ggml_fp32_to_bf16_row(row.data(), reinterpret_cast<ggml_bf16_t*>(dst), cols);
    else
      ggml_quantize_chunk(type, row.data(), dst, 0, 1, cols, nullptr);
  }
}

struct Layer {
  ggml_tensor *gate, *up, *down;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: llama_moe_peer SHAPE TOKENS TYPE THREADS REPEATS\n");
    return 2;
  }
  const Shape s = parse_shape(argv[1]);
  std::vector<int64_t> tokens;
  {
    std::stringstream list(argv[2]);
    for (std::string item; std::getline(list, item, ',');) tokens.push_back(std::stoll(item));
  }
  const std::string type_name = argv[3];
  const ggml_type type = type_name == "bf16" ? GGML_TYPE_BF16 : type_name == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_COUNT;
  if (type == GGML_TYPE_COUNT) {
    std::fprintf(stderr, "TYPE must be bf16 or q8_0, not '%s'\n", argv[3]);
    return 2;
  }
  const int threads = std::atoi(argv[4]), repeats = std::atoi(argv[5]);

  const double expert_bytes =
      static_cast<double>(2 * ggml_row_size(type, s.H) * s.I + ggml_row_size(type, s.I) * s.H);
  const int layers = static_cast<int>(std::clamp(std::ceil(1.5 * (1 << 30) / (expert_bytes * s.E)), 2.0, 8.0));
  const size_t weight_bytes = static_cast<size_t>(expert_bytes * s.E * layers) + 64 * 1024 * 1024;
  ggml_init_params wp{.mem_size = weight_bytes, .mem_buffer = nullptr, .no_alloc = false};
  ggml_context* weights = ggml_init(wp);
  std::mt19937 rng(1234);
  std::vector<Layer> stack;
  for (int l = 0; l < layers; ++l) {
    Layer layer{ggml_new_tensor_3d(weights, type, s.H, s.I, s.E), ggml_new_tensor_3d(weights, type, s.H, s.I, s.E),
                ggml_new_tensor_3d(weights, type, s.I, s.H, s.E)};
    fill(layer.gate, type, rng);
    fill(layer.up, type, rng);
    fill(layer.down, type, rng);
    stack.push_back(layer);
  }
  std::fprintf(stderr,
               "llama_moe_peer: %s (H %ld, I %ld, E %ld, k %ld), %s, %d threads, %d layers rotated; ggml CPU: "
               "AVX512 %d, AVX512-BF16 %d, AVX512-VNNI %d\n",
               s.name.c_str(), s.H, s.I, s.E, s.k, type_name.c_str(), threads, layers, ggml_cpu_has_avx512(),
               ggml_cpu_has_avx512_bf16(), ggml_cpu_has_avx512_vnni());

  // One thread pool for all runs, as llama.cpp keeps one (a pool per compute call would time thread starts).
  ggml_threadpool_params pool_params = ggml_threadpool_params_default(threads);
  ggml_threadpool* pool = ggml_threadpool_new(&pool_params);
  std::vector<uint8_t> work;
  for (const int64_t T : tokens) {
    constexpr int kInputs = 4;
    std::vector<double> us;
    std::vector<double> touched;
    for (int rep = -1; rep < repeats; ++rep) {  // one warm-up run
      const size_t index = static_cast<size_t>(rep + 1);
      const Layer& layer = stack[index % stack.size()];
      // A fresh graph each run (llama.cpp rebuilds its graph per batch too); its build is not timed.
      const size_t graph_bytes = static_cast<size_t>(T) * (s.H * (3 + 2 * s.k) + 5 * s.I * s.k) * 4 +
                                 ggml_graph_overhead() + 16 * ggml_tensor_overhead() * (s.k + 16) + (64 << 20);
      ggml_init_params gp{.mem_size = graph_bytes, .mem_buffer = nullptr, .no_alloc = false};
      ggml_context* ctx = ggml_init(gp);
      std::mt19937 route(static_cast<unsigned>(77 * (index % kInputs) + T));
      ggml_tensor* x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, s.H, 1, T);
      ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, s.k, T);
      ggml_tensor* w = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, s.k, T);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int64_t i = 0; i < s.H * T; ++i) static_cast<float*>(x->data)[i] = normal(route);
      std::set<int32_t> used;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> experts(s.E);
        for (int32_t e = 0; e < s.E; ++e) experts[e] = e;
        std::shuffle(experts.begin(), experts.end(), route);
        for (int64_t j = 0; j < s.k; ++j) {
          static_cast<int32_t*>(ids->data)[t * s.k + j] = experts[j];
          static_cast<float*>(w->data)[t * s.k + j] = 1.0f / s.k;
          used.insert(experts[j]);
        }
      }
      ggml_tensor* gate = ggml_mul_mat_id(ctx, layer.gate, x, ids);  // [I, k, T]
      ggml_tensor* up = ggml_mul_mat_id(ctx, layer.up, x, ids);
      ggml_tensor* act = ggml_mul(ctx, ggml_silu(ctx, gate), up);
      ggml_tensor* down = ggml_mul(ctx, ggml_mul_mat_id(ctx, layer.down, act, ids), w);  // [H, k, T]
      ggml_tensor* out = ggml_view_2d(ctx, down, s.H, T, down->nb[2], 0);
      for (int64_t j = 1; j < s.k; ++j)
        out = ggml_add(ctx, out, ggml_view_2d(ctx, down, s.H, T, down->nb[2], j * down->nb[1]));
      ggml_cgraph* graph = ggml_new_graph(ctx);
      ggml_build_forward_expand(graph, out);
      ggml_cplan plan = ggml_graph_plan(graph, threads, pool);
      if (work.size() < plan.work_size) work.resize(plan.work_size);
      plan.work_data = work.data();
      const auto start = std::chrono::steady_clock::now();
      if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) {
        std::fprintf(stderr, "ggml_graph_compute failed\n");
        return 1;
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ggml_free(ctx);
      if (rep < 0) continue;
      us.push_back(seconds * 1e6);
      touched.push_back(static_cast<double>(used.size()));
    }
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    double mean_touched = 0;
    for (double t : touched) mean_touched += t / touched.size();
    std::printf("%s %ld %s %.1f %.1f %.1f %.2f\n", s.name.c_str(), T, type_name.c_str(), median, sorted.front(),
                mean_touched, mean_touched * expert_bytes / (median * 1e-6) / 1e9);
    std::fflush(stdout);
  }
  ggml_threadpool_free(pool);
  ggml_free(weights);
  return 0;
}
