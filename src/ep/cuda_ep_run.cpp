// run_cuda_ep_layer: the EpMoeLayer contract (host tensors in, rank 0 gathers) over the GPU layer.
#include <chrono>

#include "moe/core/check.h"
#include "moe/cuda/device_buffer.h"
#include "moe/ep/cuda_ep.h"

namespace moe::ep {

EpOutput run_cuda_ep_layer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights,
                           const Placement& placement, EpWires wires, const Tensor& input) {
  const int64_t H = config.hidden_size, k = config.router.top_k;
  const Tensor x_all = layer_input_f32(input, H);  // [T, H] F32
  const int64_t T = x_all.size(0);
  const int R = comm.size();
  const TokenRange range = token_range(T, comm.rank(), R);
  const int64_t T_local = range.end - range.begin;
  // Every rank sizes its buffers for the largest slice, so that what a peer sends always fits.
  const int64_t max_tokens = std::max<int64_t>(token_range(T, 0, R).end, 1);
  CudaEpMoeLayer layer(comm, config, weights, placement, wires, max_tokens);

  const Tensor x = x_all.narrow(0, range.begin, T_local).to(DType::BF16);  // [T_local, H]
  cuda::DeviceBuffer<uint16_t> d_x(std::max<int64_t>(T_local, 1) * H);
  cuda::DeviceBuffer<float> d_out(std::max<int64_t>(T_local, 1) * H), d_weights(std::max<int64_t>(T_local, 1) * k);
  cuda::DeviceBuffer<int32_t> d_ids(std::max<int64_t>(T_local, 1) * k);
  if (T_local > 0) d_x.upload(x.data_as<uint16_t>(), T_local * H);
  cudaStream_t stream = nullptr;
  comm.host().barrier();
  const auto start = std::chrono::steady_clock::now();
  layer.forward(reinterpret_cast<const bf16*>(d_x.get()), T_local, d_out.get(), d_ids.get(), d_weights.get(), stream);
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  Tensor y = Tensor::empty(DType::F32, {T_local, H});
  TopK topk{.ids = Tensor::empty(DType::I32, {T_local, k}), .weights = Tensor::empty(DType::F32, {T_local, k})};
  if (T_local > 0) {
    MOE_CUDA_CHECK(cudaMemcpy(y.data(), d_out.get(), y.nbytes(), cudaMemcpyDeviceToHost));
    MOE_CUDA_CHECK(cudaMemcpy(topk.ids.data(), d_ids.get(), topk.ids.nbytes(), cudaMemcpyDeviceToHost));
    MOE_CUDA_CHECK(cudaMemcpy(topk.weights.data(), d_weights.get(), topk.weights.nbytes(), cudaMemcpyDeviceToHost));
  }

  Communicator& host = comm.host();
  EpOutput result;
  result.ranks = gather_stats(host, layer.stats(stream));
  LayerOutput& out = result.layer;
  out.hidden_states = gather_rows(host, y, T, DType::F32);
  out.topk.ids = gather_rows(host, topk.ids, T, DType::I32);
  out.topk.weights = gather_rows(host, topk.weights, T, DType::F32);
  out.timings.experts_ms = ms;  // the whole forward of this rank, exchange included
  if (host.rank() == 0)
    out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T,
                                            static_cast<int>(k), config.router.n_experts);
  return result;
}

}  // namespace moe::ep
