#include <algorithm>
#include <numeric>
#include <vector>

#include "ep_kernels.h"
#include "moe/core/check.h"
#include "cuda/device_buffer.h"
#include "ep/cuda_ep_exchange.h"

namespace moe::ep {

using cuda::DeviceBuffer;
using kernels::WirePair;

namespace {

// Byte counts and displacements of `counts` items of `unit` bytes, packed in peer order.
struct Segments {
  std::vector<int64_t> bytes, displs;
};
// Bytes of one partial-sum value on the combine wire.
int64_t combine_value_bytes(Transfer combine) { return combine == Transfer::f32 ? 4 : 2; }

Segments segments(const int64_t* counts, int n, int64_t unit) {
  Segments s{std::vector<int64_t>(n), std::vector<int64_t>(n, 0)};
  for (int p = 0; p < n; ++p) {
    s.bytes[p] = counts[p] * unit;
    if (p > 0) s.displs[p] = s.displs[p - 1] + s.bytes[p - 1];
  }
  return s;
}

}  // namespace

struct CudaEpExchange::State {
  DeviceCommunicator* comm = nullptr;
  Placement placement;
  Transfer transfer = Transfer::bf16, combine = Transfer::bf16;
  int R = 1, me = 0, k = 1, slots = 0;
  int64_t H = 0, max_tokens = 0, row_bytes = 0, max_sent = 0, max_received = 0;
  // replica tables [E] and [E, max_replicas]
  DeviceBuffer<int32_t> n_replicas, replica_rank, replica_slot;
  int max_replicas = 1;
  // dispatch
  DeviceBuffer<int32_t> pair_rank, pair_slot;  // [max_tokens, k]
  DeviceBuffer<int32_t> copy_pos, copy_of;     // [R, max_tokens]
  DeviceBuffer<int64_t> counts;                // [2R]: copies to each rank, then copies from each rank
  std::vector<int64_t> host_counts;            // [2R]
  DeviceBuffer<uint8_t> send_rows, recv_rows;  // [max_sent | max_received, row_bytes]
  DeviceBuffer<WirePair> send_pairs, recv_pairs;  // [max_sent | max_received, k]
  DeviceBuffer<bf16> decoded;                  // fp8 only: [max_received, H]
  DeviceBuffer<int32_t> slot_ids;              // [max_received, k]
  DeviceBuffer<float> weights;                 // [max_received, k]
  // combine
  DeviceBuffer<uint8_t> back;                  // [max_sent, H] of the combine wire (bf16 or fp32)
  int64_t n_tokens = 0, n_sent = 0, n_received = 0;
  ExchangeStats stats;
  int64_t dispatch_bytes = 0, combine_bytes = 0;

  const int64_t* send_counts() const { return host_counts.data(); }
  const int64_t* recv_counts() const { return host_counts.data() + R; }
};

CudaEpExchange::CudaEpExchange(DeviceCommunicator& comm, Placement placement, EpWires wires, int top_k,
                               int64_t hidden, int64_t max_tokens)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.comm = &comm;
  s.R = comm.size();
  s.me = comm.rank();
  s.k = top_k;
  s.H = hidden;
  s.max_tokens = std::max<int64_t>(max_tokens, 1);
  const Transfer transfer = wires.dispatch, combine = wires.combine;
  s.transfer = transfer;
  s.combine = combine;
  check_placement(placement, placement.n_experts, s.R);
  MOE_CHECK(s.R <= kernels::kMaxRanks, "expert parallelism on GPUs handles up to {} ranks, {} are running",
            kernels::kMaxRanks, s.R);
  MOE_CHECK(transfer != Transfer::f32,
            "expert parallelism on GPUs sends bf16 rows (the layer's input is bf16): choose a bf16 or fp8 dispatch "
            "wire");
  MOE_CHECK(combine != Transfer::fp8, "expert parallelism on GPUs sends the partial sums back as bf16 or f32, not "
            "fp8: choose a bf16 or f32 combine wire");
  MOE_CHECK(top_k >= 1 && top_k <= 32, "top_k {} must be in [1, 32] on GPUs", top_k);
  MOE_CHECK(hidden % 64 == 0, "expert parallelism on GPUs needs a hidden size that is a multiple of 64, got {}",
            hidden);
  s.placement = std::move(placement);
  s.slots = static_cast<int>(s.placement.rank_experts[s.me].size());
  s.row_bytes = transfer_row_bytes(transfer, hidden);

  const int E = s.placement.n_experts;
  for (int e = 0; e < E; ++e) s.max_replicas = std::max(s.max_replicas, s.placement.n_replicas(e));
  std::vector<int32_t> n_rep(E), rep_rank(static_cast<size_t>(E) * s.max_replicas, 0), rep_slot(rep_rank.size(), 0);
  for (int e = 0; e < E; ++e) {
    n_rep[e] = s.placement.n_replicas(e);
    for (int i = 0; i < n_rep[e]; ++i) {
      rep_rank[e * s.max_replicas + i] = s.placement.replica_rank[e][i];
      rep_slot[e * s.max_replicas + i] = s.placement.replica_slot[e][i];
    }
  }
  s.n_replicas = DeviceBuffer<int32_t>(E);
  s.n_replicas.upload(n_rep.data(), E);
  s.replica_rank = DeviceBuffer<int32_t>(rep_rank.size());
  s.replica_rank.upload(rep_rank.data(), rep_rank.size());
  s.replica_slot = DeviceBuffer<int32_t>(rep_slot.size());
  s.replica_slot.upload(rep_slot.data(), rep_slot.size());

  // A token travels at most once to each rank; every peer may send all of its tokens here.
  const int64_t Tm = s.max_tokens;
  s.max_sent = Tm * std::min(s.R, s.k);
  s.max_received = Tm * s.R;
  s.pair_rank = DeviceBuffer<int32_t>(Tm * s.k);
  s.pair_slot = DeviceBuffer<int32_t>(Tm * s.k);
  s.copy_pos = DeviceBuffer<int32_t>(s.R * Tm);
  s.copy_of = DeviceBuffer<int32_t>(s.R * Tm);
  s.counts = DeviceBuffer<int64_t>(2 * s.R);
  s.host_counts.assign(2 * s.R, 0);
  s.send_rows = DeviceBuffer<uint8_t>(s.max_sent * s.row_bytes);
  s.recv_rows = DeviceBuffer<uint8_t>(s.max_received * s.row_bytes);
  s.send_pairs = DeviceBuffer<WirePair>(s.max_sent * s.k);
  s.recv_pairs = DeviceBuffer<WirePair>(s.max_received * s.k);
  if (transfer == Transfer::fp8) s.decoded = DeviceBuffer<bf16>(s.max_received * hidden);
  s.slot_ids = DeviceBuffer<int32_t>(s.max_received * s.k);
  s.weights = DeviceBuffer<float>(s.max_received * s.k);
  s.back = DeviceBuffer<uint8_t>(s.max_sent * hidden * combine_value_bytes(combine));
}

CudaEpExchange::~CudaEpExchange() = default;

void CudaEpExchange::dispatch(const bf16* x, const int32_t* topk_ids, const float* topk_weights, int64_t T,
                              cudaStream_t stream) {
  State& s = *state_;
  MOE_CHECK(T >= 0 && T <= s.max_tokens, "dispatch: {} tokens exceed the buffers of {} (max_tokens)", T,
            s.max_tokens);
  s.n_tokens = T;
  const kernels::ReplicaTable table{.n_replicas = s.n_replicas.get(), .rank = s.replica_rank.get(),
                                    .slot = s.replica_slot.get(), .max_replicas = s.max_replicas};
  kernels::ep_route(topk_ids, T, s.k, table, s.R, s.pair_rank.get(), s.pair_slot.get(), s.copy_pos.get(),
                    s.counts.get(), stream);
  kernels::ep_pack(x, topk_weights, s.pair_rank.get(), s.pair_slot.get(), s.copy_pos.get(), s.counts.get(), T, s.k,
                   s.R, s.H, s.transfer == Transfer::fp8, s.row_bytes, s.send_rows.get(), s.send_pairs.get(),
                   s.copy_of.get(), stream);

  // Counts: one int64 to each peer on the device, then both halves to the host (NCCL takes sizes from the
  // host: this is the forward's one synchronisation).
  s.comm->alltoall(s.counts.get(), s.counts.get() + s.R, sizeof(int64_t), stream);
  MOE_CUDA_CHECK(cudaMemcpyAsync(s.host_counts.data(), s.counts.get(), 2 * s.R * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, stream));
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  s.n_sent = std::accumulate(s.send_counts(), s.send_counts() + s.R, int64_t{0});
  s.n_received = std::accumulate(s.recv_counts(), s.recv_counts() + s.R, int64_t{0});
  MOE_CHECK(s.n_received <= s.max_received, "dispatch: {} copies received exceed the buffers of {}: the ranks were "
            "built with different max_tokens", s.n_received, s.max_received);

  const Segments send_rows = segments(s.send_counts(), s.R, s.row_bytes);
  const Segments recv_rows = segments(s.recv_counts(), s.R, s.row_bytes);
  s.comm->alltoallv(s.send_rows.get(), send_rows.bytes, send_rows.displs, s.recv_rows.get(), recv_rows.bytes,
                    recv_rows.displs, stream);
  const int64_t pair_bytes = s.k * int64_t{sizeof(WirePair)};
  const Segments send_pairs = segments(s.send_counts(), s.R, pair_bytes);
  const Segments recv_pairs = segments(s.recv_counts(), s.R, pair_bytes);
  s.comm->alltoallv(s.send_pairs.get(), send_pairs.bytes, send_pairs.displs, s.recv_pairs.get(), recv_pairs.bytes,
                    recv_pairs.displs, stream);

  kernels::ep_unpack(s.recv_pairs.get(), s.n_received, s.k, s.slots, s.slot_ids.get(), s.weights.get(), stream);
  if (s.transfer == Transfer::fp8)
    kernels::ep_decode_fp8(s.recv_rows.get(), s.n_received, s.H, s.row_bytes, s.decoded.get(), stream);

  const int64_t off_rank = s.n_sent - s.send_counts()[s.me];
  s.dispatch_bytes = off_rank * (s.row_bytes + pair_bytes);
  s.combine_bytes = 0;
  s.stats = {.tokens = T, .copies_sent = s.n_sent, .copies_received = s.n_received, .pairs_served = 0,
             .bytes_sent = s.dispatch_bytes,
             .bytes_received = (s.n_received - s.recv_counts()[s.me]) * (s.row_bytes + pair_bytes)};
}

int64_t CudaEpExchange::n_received() const { return state_->n_received; }
const bf16* CudaEpExchange::received_rows() const {
  const State& s = *state_;
  return s.transfer == Transfer::fp8 ? s.decoded.get() : reinterpret_cast<const bf16*>(s.recv_rows.get());
}
const int32_t* CudaEpExchange::received_slots() const { return state_->slot_ids.get(); }
const float* CudaEpExchange::received_weights() const { return state_->weights.get(); }

void CudaEpExchange::combine(const bf16* partial, const bf16* shared, const float* shared_gate_logit,
                             int64_t gate_stride, float* out, cudaStream_t stream) {
  combine_partials(partial, Transfer::bf16, shared, shared_gate_logit, gate_stride, out, stream);
}

void CudaEpExchange::combine(const float* partial, const bf16* shared, const float* shared_gate_logit,
                             int64_t gate_stride, float* out, cudaStream_t stream) {
  combine_partials(partial, Transfer::f32, shared, shared_gate_logit, gate_stride, out, stream);
}

void CudaEpExchange::combine_partials(const void* partial, Transfer type, const bf16* shared,
                                      const float* shared_gate_logit, int64_t gate_stride, float* out,
                                      cudaStream_t stream) {
  State& s = *state_;
  MOE_CHECK(s.combine == type, "combine: {} partial sums on an exchange built for {} ones", transfer_name(type),
            transfer_name(s.combine));
  // Partials go back the way the rows came: to peer p, the copies p sent; from p, ours sent to p.
  const int64_t unit = s.H * combine_value_bytes(s.combine);
  const Segments send = segments(s.recv_counts(), s.R, unit), recv = segments(s.send_counts(), s.R, unit);
  s.comm->alltoallv(partial, send.bytes, send.displs, s.back.get(), recv.bytes, recv.displs, stream);
  if (type == Transfer::f32)
    kernels::ep_combine(reinterpret_cast<const float*>(s.back.get()), s.copy_of.get(), s.R, s.n_tokens, s.H, shared,
                        shared_gate_logit, gate_stride, out, stream);
  else
    kernels::ep_combine(reinterpret_cast<const bf16*>(s.back.get()), s.copy_of.get(), s.R, s.n_tokens, s.H, shared,
                        shared_gate_logit, gate_stride, out, stream);
  s.combine_bytes = (s.n_received - s.recv_counts()[s.me]) * unit;
  s.stats.bytes_sent = s.dispatch_bytes + s.combine_bytes;
  s.stats.bytes_received += (s.n_sent - s.send_counts()[s.me]) * unit;
}

const ExchangeStats& CudaEpExchange::stats() const { return state_->stats; }
int64_t CudaEpExchange::dispatch_bytes_sent() const { return state_->dispatch_bytes; }
int64_t CudaEpExchange::combine_bytes_sent() const { return state_->combine_bytes; }
Transfer CudaEpExchange::combine_wire() const { return state_->combine; }
int CudaEpExchange::local_slots() const { return state_->slots; }
const Placement& CudaEpExchange::placement() const { return state_->placement; }

}  // namespace moe::ep
