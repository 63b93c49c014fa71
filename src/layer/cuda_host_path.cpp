#include "cuda_host_path.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/float_convert.h"
#include "cuda/check.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "moe/layer/cuda_stages.h"

namespace moe {

namespace {

// Pinned host memory shared by the host paths of every CUDA layer in the process (the decoder runs its
// layers one after another, so one staging area serves them all), grown to the largest chunk seen; the
// mutex is held for a whole host forward.
// NOTE: never freed: the CUDA runtime may be torn down before static destructors run.
struct PinnedStaging {
  std::mutex mutex;
  unsigned char* data = nullptr;
  size_t bytes = 0;

  unsigned char* reserve(size_t n) {
    if (n <= bytes) return data;
    if (data) MOE_CUDA_CHECK(cudaFreeHost(data));
    data = nullptr;
    bytes = 0;
    MOE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data), n));
    bytes = n;
    return data;
  }
};

PinnedStaging& pinned_staging() {
  static PinnedStaging* staging = new PinnedStaging();
  return *staging;
}

// One layer's device side of the host path: a stream, events, and input/output buffers grown on first use
// to the largest chunk (the device stages' own workspace is sized at construction; these exist only for
// callers of the host path).
class CudaHostPath {
 public:
  CudaHostPath(const MoeConfig& config, int64_t max_tokens)
      : H_(config.hidden_size), k_(config.router.top_k), E_(config.router.n_experts), max_tokens_(max_tokens) {
    MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MOE_CUDA_CHECK(cudaEventCreate(&start_));
    MOE_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~CudaHostPath() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }
  CudaHostPath(const CudaHostPath&) = delete;
  CudaHostPath& operator=(const CudaHostPath&) = delete;

  LayerOutput forward(MoeLayer& layer, const Tensor& input) {
    const Tensor x = layer_input_f32(input, H_);  // [T, H] F32
    const int64_t T = x.size(0), H = H_, k = k_;
    LayerOutput out;
    out.hidden_states = Tensor::empty(DType::F32, {T, H});
    out.topk.ids = Tensor::empty(DType::I32, {T, k});
    out.topk.weights = Tensor::empty(DType::F32, {T, k});
    std::vector<int64_t> dropped(E_, 0);
    int64_t capacity = -1;
    const int64_t chunk = std::min(T, max_tokens_);
    reserve_device(chunk);

    PinnedStaging& staging = pinned_staging();
    const std::lock_guard lock(staging.mutex);
    // [chunk, H] bf16 in, [chunk, H] F32 out, [chunk, k] ids and weights, each 64-byte aligned
    const auto align = [](size_t n) { return (n + 63) / 64 * 64; };
    const size_t x_bytes = align(chunk * H * 2), out_bytes = align(chunk * H * 4), ids_bytes = align(chunk * k * 4);
    unsigned char* pinned = staging.reserve(x_bytes + out_bytes + 2 * ids_bytes);
    auto* h_x = reinterpret_cast<uint16_t*>(pinned);
    auto* h_out = reinterpret_cast<float*>(pinned + x_bytes);
    auto* h_ids = reinterpret_cast<int32_t*>(pinned + x_bytes + out_bytes);
    auto* h_weights = reinterpret_cast<float*>(pinned + x_bytes + out_bytes + ids_bytes);

    float device_ms = 0;
    for (int64_t t0 = 0; t0 < T; t0 += max_tokens_) {
      const int64_t n = std::min(max_tokens_, T - t0);
      convert_from_f32(x.data_as<float>() + t0 * H, h_x, DType::BF16, n * H);
      MOE_CUDA_CHECK(cudaMemcpyAsync(d_x_.get(), h_x, n * H * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_));
      Tensor d_out = Tensor::view(d_out_.get(), DType::F32, {n, H}, nullptr, Device::cuda);
      const TopK d_topk{.ids = Tensor::view(d_ids_.get(), DType::I32, {n, k}, nullptr, Device::cuda),
                        .weights = Tensor::view(d_weights_.get(), DType::F32, {n, k}, nullptr, Device::cuda)};
      MOE_CUDA_CHECK(cudaEventRecord(start_, stream_));
      layer.forward(Tensor::view(d_x_.get(), DType::BF16, {n, H}, nullptr, Device::cuda), d_topk, d_out,
                    Stream::cuda(stream_));
      MOE_CUDA_CHECK(cudaEventRecord(stop_, stream_));
      MOE_CUDA_CHECK(cudaMemcpyAsync(h_out, d_out_.get(), n * H * sizeof(float), cudaMemcpyDeviceToHost, stream_));
      MOE_CUDA_CHECK(cudaMemcpyAsync(h_ids, d_ids_.get(), n * k * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
      MOE_CUDA_CHECK(cudaMemcpyAsync(h_weights, d_weights_.get(), n * k * sizeof(float), cudaMemcpyDeviceToHost,
                                     stream_));
      const LoadCounts counts = layer.read_counts(Stream::cuda(stream_));  // synchronises the stream
      float ms = 0;
      MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      device_ms += ms;
      std::memcpy(out.hidden_states.data_as<float>() + t0 * H, h_out, n * H * sizeof(float));
      std::memcpy(out.topk.ids.data_as<int32_t>() + t0 * k, h_ids, n * k * sizeof(int32_t));
      std::memcpy(out.topk.weights.data_as<float>() + t0 * k, h_weights, n * k * sizeof(float));
      for (int64_t e = 0; e < E_ && e < static_cast<int64_t>(counts.dropped_per_expert.size()); ++e)
        dropped[e] += counts.dropped_per_expert[e];
      capacity = counts.capacity;
    }
    out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T,
                                            static_cast<int>(k), static_cast<int>(E_), dropped, capacity);
    out.timings.experts_ms = device_ms;
    return out;
  }

 private:
  void reserve_device(int64_t tokens) {
    if (tokens <= reserved_) return;
    d_x_ = cuda::DeviceBuffer<uint16_t>(tokens * H_);
    d_out_ = cuda::DeviceBuffer<float>(tokens * H_);
    d_ids_ = cuda::DeviceBuffer<int32_t>(tokens * k_);
    d_weights_ = cuda::DeviceBuffer<float>(tokens * k_);
    reserved_ = tokens;
  }

  int64_t H_, k_, E_, max_tokens_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  int64_t reserved_ = 0;                 // tokens the device buffers hold
  cuda::DeviceBuffer<uint16_t> d_x_;     // [reserved, H] bf16
  cuda::DeviceBuffer<float> d_out_;      // [reserved, H]
  cuda::DeviceBuffer<int32_t> d_ids_;    // [reserved, k]
  cuda::DeviceBuffer<float> d_weights_;  // [reserved, k]
};

}  // namespace

std::function<LayerOutput(MoeLayer&, const Tensor&)> make_cuda_host_path(const MoeConfig& config, int64_t max_tokens) {
  auto path = std::make_shared<CudaHostPath>(config, max_tokens);
  return [path](MoeLayer& layer, const Tensor& x) { return path->forward(layer, x); };
}

bool cuda_device_available() { return !cuda::visible_gpus().empty(); }

}  // namespace moe
