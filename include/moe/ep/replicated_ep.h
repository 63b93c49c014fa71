#pragma once
// A MoE block under expert parallelism for a model whose other layers run replicated on every rank (the
// whole model on every rank, the same tokens in the same order): each rank dispatches its share of the
// tokens through EpMoeLayer, which gathers the block's output on rank 0; rank 0 then sends it (hidden
// states and the router's top-k) to every rank, so that all ranks continue with identical states.

#include "moe/ep/ep_layer.h"

namespace moe::ep {

// Rank 0's `bytes` bytes at `data` land at `data` on every rank. Collective.
void broadcast_from_rank0(Communicator& comm, void* data, int64_t bytes);

class ReplicatedEpMoeLayer {
 public:
  // As EpMoeLayer (weights are the whole block; only this rank's experts are read).
  ReplicatedEpMoeLayer(Communicator& comm, MoeConfig config, MoeWeights weights, Placement placement,
                       Transfer transfer = Transfer::f32);
  // x [T, H] F32, the same on every rank -> on every rank: hidden_states [T, H] F32, topk ids [T, k] I32 and
  // weights [T, k] F32; stats on rank 0 only. Collective.
  LayerOutput forward(const Tensor& x);
  // [R] every rank's exchange statistics summed over the forwards so far, on every rank. Collective.
  std::vector<ExchangeStats> gather_totals();

 private:
  Communicator& comm_;
  int top_k_;
  EpMoeLayer layer_;
  ExchangeStats totals_;  // this rank's, over the forwards so far
};

}  // namespace moe::ep
