// `moe bench --backend cuda`: the CUDA layer replayed from CUDA graphs over rotating inputs, timed with
// CUDA events; the bf16 matmul rate (cuBLAS) and the device copy bandwidth measured in the same run. With fp8
// or int4 experts, a second layer of the same weights (config.quant fp8_block or awq_int4, quantised on the
// device) is timed beside the bf16 one.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "bench/bench.h"
#include "core/float_convert.h"
#include "cuda/captured_graph.h"
#include "cuda/check.h"
#include "cuda/device_buffer.h"
#include "moe/layer/cuda_stages.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

constexpr int kInputs = 8;  // rotating inputs: each replay routes to other experts, so weights come cold

// Median and min of `runs` timings of `launch`, each between two events.
template <class F>
std::pair<double, double> time_us(int runs, cudaStream_t stream, F&& launch) {
  std::vector<cudaEvent_t> events(2 * runs);
  for (auto& e : events) MOE_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < runs; ++r) {
    MOE_CUDA_CHECK(cudaEventRecord(events[2 * r], stream));
    launch(r);
    MOE_CUDA_CHECK(cudaEventRecord(events[2 * r + 1], stream));
  }
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(runs);
  for (int r = 0; r < runs; ++r) {
    float ms = 0;
    MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * r], events[2 * r + 1]));
    us[r] = ms * 1e3;
  }
  for (auto& e : events) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  return {us[runs / 2], us[0]};
}

// cuBLAS bf16 GEMM 8192^3 (fp32 accumulation) on random data: the matmul ceiling.
double measure_matmul_tflops(cudaStream_t stream) {
  const int n = 8192;
  cuda::DeviceBuffer<uint16_t> a(size_t{n} * n), b(size_t{n} * n), c(size_t{n} * n);
  const Tensor host = random_tensor({n, n}, 1.0f, 7, DType::BF16);
  MOE_CUDA_CHECK(cudaMemcpy(a.get(), host.data(), host.nbytes(), cudaMemcpyHostToDevice));
  MOE_CUDA_CHECK(cudaMemcpy(b.get(), host.data(), host.nbytes(), cudaMemcpyHostToDevice));
  cublasHandle_t handle;
  MOE_CUBLAS_CHECK(cublasCreate(&handle));
  MOE_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&](int) {
    MOE_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16BF, n, b.get(),
                                  CUDA_R_16BF, n, &zero, c.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < 3; ++i) gemm(i);
  const auto [median, best] = time_us(10, stream, gemm);
  cublasDestroy(handle);
  return 2.0 * n * n * double(n) / (median * 1e-6) / 1e12;
}

// Device-to-device copy of 2 GiB, counting the bytes read and written: the memory ceiling.
double measure_copy_tbps(cudaStream_t stream) {
  const size_t bytes = size_t{2} << 30;
  cuda::DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  MOE_CUDA_CHECK(cudaMemset(src.get(), 1, bytes));
  auto copy = [&](int) { MOE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream)); };
  for (int i = 0; i < 3; ++i) copy(i);
  const auto [median, best] = time_us(10, stream, copy);
  return 2.0 * double(bytes) / (median * 1e-6) / 1e12;
}

}  // namespace

std::vector<BenchRow> run_cuda_bench(const BenchShape& shape, const std::vector<int64_t>& tokens,
                                     BenchRouting routing, int repeats, const std::string& expert_weights) {
  MOE_CHECK(expert_weights == "bf16" || expert_weights == "fp8" || expert_weights == "int4",
            "--cuda-weights '{}': expected bf16, fp8 or int4", expert_weights);
  MOE_CHECK(cuda_device_available(), "moe bench --backend cuda: no GPU is visible (use --backend cpu)");
  cudaStream_t stream;
  MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double matmul = measure_matmul_tflops(stream), copy = measure_copy_tbps(stream);

  const MoeConfig config = bench_config(shape);
  MoeWeights weights = random_moe_weights(config, 1234, DType::BF16);
  shape_router_for_routing(weights, routing, 99);
  const int64_t T_max = *std::max_element(tokens.begin(), tokens.end());
  const int64_t H = config.hidden_size, k = config.router.top_k;
  MoeLayer layer(config, make_cuda_stages(config, weights, {.max_tokens = T_max}));
  std::unique_ptr<MoeLayer> quantised;
  if (expert_weights != "bf16") {
    MoeConfig q_config = config;
    q_config.quant.method = expert_weights == "fp8" ? quant::QuantMethod::fp8_block : quant::QuantMethod::awq_int4;
    quantised = std::make_unique<MoeLayer>(q_config, make_cuda_stages(q_config, weights, {.max_tokens = T_max}));
  }

  std::vector<std::unique_ptr<cuda::DeviceBuffer<uint16_t>>> inputs;
  for (int i = 0; i < kInputs; ++i) {
    Tensor x = random_tensor({T_max, H}, 1.0f, 500 + i);
    for (int64_t t = 0; t < T_max; ++t) x.data_as<float>()[t * H] = 1.0f;  // the routing feature
    const Tensor xb = x.to(DType::BF16);
    inputs.push_back(std::make_unique<cuda::DeviceBuffer<uint16_t>>(T_max * H));
    MOE_CUDA_CHECK(cudaMemcpy(inputs.back()->get(), xb.data(), xb.nbytes(), cudaMemcpyHostToDevice));
  }
  cuda::DeviceBuffer<float> out(T_max * H), topk_weights(T_max * k);
  cuda::DeviceBuffer<int32_t> topk_ids(T_max * k);
  const auto on_device = [](void* p, DType dtype, std::vector<int64_t> shape) {
    return Tensor::view(p, dtype, std::move(shape), nullptr, Device::cuda);
  };

  // One row: `timed` at T tokens, its graphs replayed `repeats` times.
  const auto time_layer = [&](MoeLayer& timed, int64_t T, const std::string& weights_name) {
    std::vector<cuda::CapturedGraph> graphs;
    double touched = 0;
    for (int i = 0; i < kInputs; ++i) {
      const Tensor x = on_device(inputs[i]->get(), DType::BF16, {T, H});  // [T, H]
      const TopK topk{.ids = on_device(topk_ids.get(), DType::I32, {T, k}),
                      .weights = on_device(topk_weights.get(), DType::F32, {T, k})};
      Tensor y = on_device(out.get(), DType::F32, {T, H});  // [T, H]
      auto forward = [&, x, topk, y]() mutable { timed.forward(x, topk, y, Stream::cuda(stream)); };
      forward();  // outside the capture: lazy kernel attributes, cuBLAS heuristics
      const LoadCounts counts = timed.read_counts(Stream::cuda(stream));
      touched += std::count_if(counts.tokens_per_expert.begin(), counts.tokens_per_expert.end(),
                               [](int64_t c) { return c > 0; });
      graphs.emplace_back(stream, forward, cudaStreamCaptureModeThreadLocal);
    }
    for (int i = 0; i < 2 * kInputs; ++i) graphs[i % kInputs].launch(stream);
    const auto [median, best] = time_us(repeats, stream, [&](int r) { graphs[r % kInputs].launch(stream); });

    BenchRow row;
    row.shape = shape;
    row.tokens = T;
    row.backend = "cuda";
    row.routing = routing == BenchRouting::zipf ? "zipf" : "balanced";
    row.us_median = median;
    row.us_min = best;
    row.experts_touched = touched / kInputs;
    row.matmul_tflops = matmul;
    row.copy_tbps = copy;
    row.path = timed.describe_path(T);
    row.weights = weights_name;
    finish_row(row);
    return row;
  };

  std::vector<BenchRow> rows;
  for (int64_t T : tokens) {
    rows.push_back(time_layer(layer, T, "bf16"));
    if (quantised) {
      // NOTE: past the int4 layer's decode limit it runs its bf16 experts: named so, by its path.
      BenchRow row = time_layer(*quantised, T, expert_weights);
      row.peer = "the bf16 layer";
      row.peer_us = rows.back().us_median;
      rows.push_back(row);
    }
  }
  cudaStreamDestroy(stream);
  return rows;
}

double device_copy_tbps() { return measure_copy_tbps(nullptr); }

double device_matmul_tflops() { return measure_matmul_tflops(nullptr); }

}  // namespace moe::cli
