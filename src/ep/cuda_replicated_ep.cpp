// CudaReplicatedEpMoeLayer: chunks of the forward split over the ranks, CudaEpMoeLayer on each rank's
// slice, an all-gather of the slices on the device, one copy to the host.
#include "moe/ep/cuda_replicated_ep.h"

#include <algorithm>

#include "moe/core/check.h"
#include "moe/cuda/device_buffer.h"
#include "moe/ep/cuda_ep.h"

namespace moe::ep {

using cuda::DeviceBuffer;

struct CudaReplicatedEpMoeLayer::State {
  DeviceCommunicator& comm;
  int64_t H, k, chunk, max_local;
  CudaEpMoeLayer layer;
  DeviceBuffer<bf16> x;                                  // [max_local, H] this rank's slice
  DeviceBuffer<float> out, weights;                      // [max_local, H], [max_local, k]
  DeviceBuffer<int32_t> ids;                             // [max_local, k]
  DeviceBuffer<float> all_out, all_weights;              // [chunk, H], [chunk, k]: every rank's slices
  DeviceBuffer<int32_t> all_ids;                         // [chunk, k]
  ExchangeStats totals;                                  // this rank's, over the forwards so far

  State(DeviceCommunicator& c, const MoeConfig& config, const MoeWeights& w, Placement placement, EpWires wires,
        int64_t chunk_tokens, int64_t max_local_tokens)
      : comm(c),
        H(config.hidden_size),
        k(config.router.top_k),
        chunk(chunk_tokens),
        max_local(max_local_tokens),
        layer(c, config, w, std::move(placement), wires, max_local_tokens),
        x(max_local_tokens * config.hidden_size),
        out(max_local_tokens * config.hidden_size),
        weights(max_local_tokens * config.router.top_k),
        ids(max_local_tokens * config.router.top_k),
        all_out(chunk_tokens * config.hidden_size),
        all_weights(chunk_tokens * config.router.top_k),
        all_ids(chunk_tokens * config.router.top_k) {}

  // Every rank's [len_r, width] rows of `local` (4-byte values) land at rows [begin_r, end_r) of `all` on
  // every rank. Enqueued on the default stream.
  void all_gather(const void* local, void* all, int64_t n_tokens, int64_t width) {
    const int R = comm.size();
    const int64_t row_bytes = width * 4;
    const TokenRange mine = token_range(n_tokens, comm.rank(), R);
    std::vector<int64_t> send_counts(R, (mine.end - mine.begin) * row_bytes), send_displs(R, 0);
    std::vector<int64_t> recv_counts(R), recv_displs(R);
    for (int r = 0; r < R; ++r) {
      const TokenRange range = token_range(n_tokens, r, R);
      recv_counts[r] = (range.end - range.begin) * row_bytes;
      recv_displs[r] = range.begin * row_bytes;
    }
    comm.alltoallv(local, send_counts, send_displs, all, recv_counts, recv_displs, nullptr);
  }
};

CudaReplicatedEpMoeLayer::CudaReplicatedEpMoeLayer(DeviceCommunicator& comm, const MoeConfig& config,
                                                   const MoeWeights& weights, Placement placement, EpWires wires,
                                                   int64_t max_batched_tokens) {
  MOE_CHECK(max_batched_tokens >= 1, "max_batched_tokens must be at least 1, got {}", max_batched_tokens);
  // Every rank sizes its buffers for the largest slice (rank 0's), so that what a peer sends always fits.
  const int64_t max_local = std::max<int64_t>(token_range(max_batched_tokens, 0, comm.size()).end, 1);
  state_ = std::make_unique<State>(comm, config, weights, std::move(placement), wires, max_batched_tokens,
                                   max_local);
}

CudaReplicatedEpMoeLayer::~CudaReplicatedEpMoeLayer() = default;

LayerOutput CudaReplicatedEpMoeLayer::forward(const Tensor& input) {
  State& s = *state_;
  const int64_t H = s.H, k = s.k;
  const Tensor x = layer_input_f32(input, H).to(DType::BF16);  // [T, H]
  const int64_t T = x.size(0);
  LayerOutput out;
  out.hidden_states = Tensor::empty(DType::F32, {T, H});
  out.topk.ids = Tensor::empty(DType::I32, {T, k});
  out.topk.weights = Tensor::empty(DType::F32, {T, k});
  const int R = s.comm.size(), me = s.comm.rank();
  // NOTE: every rank sees the same T, so all of them run the same chunks and the same collectives.
  for (int64_t t0 = 0; t0 < T; t0 += s.chunk) {
    const int64_t n = std::min(s.chunk, T - t0);
    const TokenRange range = token_range(n, me, R);
    const int64_t n_local = range.end - range.begin;
    if (n_local > 0)
      s.x.upload(x.data_as<bf16>() + (t0 + range.begin) * H, static_cast<size_t>(n_local * H));
    s.layer.forward(s.x.get(), n_local, s.out.get(), s.ids.get(), s.weights.get(), nullptr);
    s.totals += s.layer.stats(nullptr);
    s.all_gather(s.out.get(), s.all_out.get(), n, H);
    s.all_gather(s.ids.get(), s.all_ids.get(), n, k);
    s.all_gather(s.weights.get(), s.all_weights.get(), n, k);
    // cudaMemcpy waits for the default stream, where the gathers were enqueued.
    MOE_CUDA_CHECK(cudaMemcpy(out.hidden_states.data_as<float>() + t0 * H, s.all_out.get(), n * H * sizeof(float),
                              cudaMemcpyDeviceToHost));
    MOE_CUDA_CHECK(cudaMemcpy(out.topk.ids.data_as<int32_t>() + t0 * k, s.all_ids.get(), n * k * sizeof(int32_t),
                              cudaMemcpyDeviceToHost));
    MOE_CUDA_CHECK(cudaMemcpy(out.topk.weights.data_as<float>() + t0 * k, s.all_weights.get(),
                              n * k * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return out;
}

std::vector<ExchangeStats> CudaReplicatedEpMoeLayer::gather_totals() {
  return gather_stats(state_->comm.host(), state_->totals);
}

}  // namespace moe::ep
