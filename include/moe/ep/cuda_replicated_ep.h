#pragma once
// The GPU sibling of ReplicatedEpMoeLayer (moe generate --ep --backend cuda): a MoE block for a model whose
// other layers run replicated on every rank (on the CPU, as the single-GPU backend runs them), one GPU per
// rank. Each rank runs its slice of the tokens (token_range) through CudaEpMoeLayer, then the slices'
// outputs (hidden states and the router's top-k) are all-gathered over the device communicator. Every
// token's output is computed by exactly one rank and copied byte for byte to the others, so the block's
// output is bit-identical on every rank without a second broadcast from rank 0, and the rounding is that
// of CudaEpMoeLayer (bf16 rows, partial sums back as bf16 or fp32, added in rank order).
// Free of CUDA headers: the CLI includes it in every build and links it only with CUDA.

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/ep/device_communicator.h"
#include "moe/ep/dispatch_combine.h"
#include "moe/layer/moe_layer.h"

namespace moe::ep {

class CudaReplicatedEpMoeLayer {
 public:
  // Uploads the router, the shared experts and this rank's experts (placement) to the communicator's GPU.
  // max_batched_tokens: the most tokens one pass handles; a longer forward runs in chunks of it, each chunk
  // split over the ranks. Every rank must pass the same value (the exchange buffers are sized from it).
  // wires: the exchange's (CudaEpExchange).
  CudaReplicatedEpMoeLayer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights,
                           Placement placement, EpWires wires, int64_t max_batched_tokens);
  ~CudaReplicatedEpMoeLayer();
  CudaReplicatedEpMoeLayer(const CudaReplicatedEpMoeLayer&) = delete;
  CudaReplicatedEpMoeLayer& operator=(const CudaReplicatedEpMoeLayer&) = delete;

  // x [T, H] F32, the same on every rank -> on every rank: hidden_states [T, H] F32, topk ids [T, k] I32 and
  // weights [T, k] F32, the same bytes everywhere. Collective.
  LayerOutput forward(const Tensor& x);
  // [R] every rank's exchange statistics (dispatch and combine; not the all-gather) summed over the
  // forwards so far, on every rank. Collective over the host communicator.
  std::vector<ExchangeStats> gather_totals();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace moe::ep
