#include "moe/ep/replicated_ep.h"

namespace moe::ep {

void broadcast_from_rank0(Communicator& comm, void* data, int64_t bytes) {
  const int R = comm.size();
  std::vector<int64_t> send_counts(R, 0), recv_counts(R, 0), displs(R, 0);
  // NOTE: MPI wants the send and receive buffers disjoint; the side that moves nothing points at a dummy.
  uint8_t dummy = 0;
  if (comm.rank() == 0) {
    for (int r = 1; r < R; ++r) send_counts[r] = bytes;
    comm.alltoallv(data, send_counts, displs, &dummy, recv_counts, displs);
  } else {
    recv_counts[0] = bytes;
    comm.alltoallv(&dummy, send_counts, displs, data, recv_counts, displs);
  }
}

ReplicatedEpMoeLayer::ReplicatedEpMoeLayer(Communicator& comm, MoeConfig config, MoeWeights weights,
                                           Placement placement, Transfer transfer)
    : comm_(comm),
      top_k_(config.router.top_k),
      layer_(comm, std::move(config), std::move(weights), std::move(placement), transfer) {}

LayerOutput ReplicatedEpMoeLayer::forward(const Tensor& x) {
  MOE_CHECK(x.dim() == 2, "the MoE block's input must be [T, H], got {}", x.shape_string());
  const int64_t T = x.size(0), H = x.size(1);
  EpOutput ep = layer_.forward(x);
  totals_ += ep.ranks[comm_.rank()];
  LayerOutput out = std::move(ep.layer);
  if (comm_.rank() != 0) {
    out.hidden_states = Tensor::empty(DType::F32, {T, H});
    out.topk.ids = Tensor::empty(DType::I32, {T, top_k_});
    out.topk.weights = Tensor::empty(DType::F32, {T, top_k_});
  }
  broadcast_from_rank0(comm_, out.hidden_states.data(), out.hidden_states.nbytes());
  broadcast_from_rank0(comm_, out.topk.ids.data(), out.topk.ids.nbytes());
  broadcast_from_rank0(comm_, out.topk.weights.data(), out.topk.weights.nbytes());
  return out;
}

std::vector<ExchangeStats> ReplicatedEpMoeLayer::gather_totals() { return gather_stats(comm_, totals_); }

}  // namespace moe::ep
