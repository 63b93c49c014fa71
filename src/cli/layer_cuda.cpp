#include "layer_cuda.h"

#include "moe/cuda/check.h"
#include "moe/cuda/device_buffer.h"
#include "moe/cuda/device_info.h"
#include "moe/cuda/moe_layer.h"

namespace moe::cli {

bool cuda_available() { return !cuda::visible_gpus().empty(); }

LayerOutput run_layer_cuda(const MoeConfig& config, const MoeWeights& weights, const Tensor& input,
                           const LayerOptions& options) {
  MOE_CHECK(cuda_available(), "--backend cuda: no GPU is visible (use --backend cpu)");
  const int64_t H = config.hidden_size, k = config.router.top_k;
  const Tensor x = layer_input_f32(input, H).to(DType::BF16);  // [T, H]
  const int64_t T = x.size(0);
  cuda::CudaMoeLayer layer(config, weights,
                           {.max_tokens = std::max<int64_t>(T, 1), .paradigm = options.paradigm,
                            .capacity_factor = options.capacity_factor, .overflow = options.overflow});
  cuda::DeviceBuffer<uint16_t> d_x(T * H);
  cuda::DeviceBuffer<float> d_out(T * H), d_weights(T * k);
  cuda::DeviceBuffer<int32_t> d_ids(T * k);
  MOE_CUDA_CHECK(cudaMemcpy(d_x.get(), x.data(), x.nbytes(), cudaMemcpyHostToDevice));
  cudaEvent_t start, stop;
  MOE_CUDA_CHECK(cudaEventCreate(&start));
  MOE_CUDA_CHECK(cudaEventCreate(&stop));
  MOE_CUDA_CHECK(cudaEventRecord(start, nullptr));
  layer.forward(reinterpret_cast<const cuda::bf16*>(d_x.get()), T, d_out.get(), d_ids.get(), d_weights.get(), nullptr);
  MOE_CUDA_CHECK(cudaEventRecord(stop, nullptr));
  MOE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);

  LayerOutput out;
  out.hidden_states = Tensor::empty(DType::F32, {T, H});
  out.topk.ids = Tensor::empty(DType::I32, {T, k});
  out.topk.weights = Tensor::empty(DType::F32, {T, k});
  MOE_CUDA_CHECK(cudaMemcpy(out.hidden_states.data(), d_out.get(), out.hidden_states.nbytes(), cudaMemcpyDeviceToHost));
  MOE_CUDA_CHECK(cudaMemcpy(out.topk.ids.data(), d_ids.get(), out.topk.ids.nbytes(), cudaMemcpyDeviceToHost));
  MOE_CUDA_CHECK(cudaMemcpy(out.topk.weights.data(), d_weights.get(), out.topk.weights.nbytes(), cudaMemcpyDeviceToHost));
  const cuda::DeviceLoadCounts counts = layer.read_counts(nullptr);
  out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T,
                                          static_cast<int>(k), config.router.n_experts, counts.dropped_per_expert,
                                          counts.capacity);
  out.timings.experts_ms = ms;
  return out;
}

}  // namespace moe::cli
