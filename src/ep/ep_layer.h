#pragma once
// One rank's MoE layer under expert parallelism: the one MoeLayer (moe/layer/moe_layer.h) over a bundle of
// stages whose prepare is the all-to-all dispatch and whose finalize is the all-to-all combine. Its forward
// takes this rank's tokens only and is collective: every rank calls it, a rank without tokens too (the
// peers' tokens still come to its experts). data_parallel.h splits a batch over the ranks and gathers it.
//   router    this rank's tokens, the whole router (replicated on every rank)
//   prepare   dispatch: each pair to the rank holding its expert (dispatch_combine.h, cuda_ep_exchange.h)
//   experts   this rank's experts, by slot, over the token copies received
//   finalize  combine: each copy's weighted partial sum back to its source, added there in rank order
//   shared    the shared experts on this rank's tokens (replicated on every rank)

#include <functional>
#include <memory>

#include "ep/communicator.h"
#include "ep/device_communicator.h"
#include "ep/device_expert_slots.h"
#include "ep/dispatch_combine.h"
#include "ep/placement.h"
#include "ep/transfer.h"
#include "moe/layer/moe_layer.h"

namespace moe::ep {

// What the factories below return: the rank's MoeLayer and what the compositions of data_parallel.h need.
struct EpLayer {
  Communicator* host = nullptr;      // the ranks (the data-parallel gathers and statistics go over it)
  std::unique_ptr<MoeLayer> layer;   // this rank's stages; forward(x) takes this rank's tokens [T_r, H]
  // This rank's exchange in the last forward (device stages: synchronises to read the pairs served).
  std::function<ExchangeStats()> last_stats;
  int64_t chunk_tokens = 0;          // the most tokens of all ranks one forward takes (device workspaces); 0: any
  // GPU layers: this rank's experts as the layer runs them (shared with it; a migration reads them). CPU: none.
  DeviceExpertSlots device_slots{};
};

// Expert parallelism on the CPU over `comm` (MPI, or one rank): the CPU router, the dispatch and combine of
// dispatch_combine.h with `transfer` as the dispatch wire (the combine sends f32), this rank's experts on the
// CPU reference ops (fp64-accumulated), the reference shared experts. weights: the whole block (views; only
// this rank's experts and the shared experts stay referenced). The result equals the single-rank layer with
// reference experts to fp32 rounding (exactly with Transfer::f32, up to the order in which a token's
// per-rank partial sums are added). With CombineMode::per_pair and Transfer::f32 the result is bit-identical
// to that single-rank layer for any placement, replicas included (dispatch_combine.h). Throws moe::Error for
// a placement of other experts or ranks.
EpLayer make_ep_layer(Communicator& comm, const MoeConfig& config, MoeWeights weights, Placement placement,
                      Transfer transfer = Transfer::f32, CombineMode combine = CombineMode::partial_sums);

// Expert parallelism on GPUs over `comm` (NCCL, one GPU per rank: the communicator's, current; CUDA builds
// only): the fp32 router (one fused launch up to 64 tokens, RouterGemm + top-k past it), the dispatch and
// combine of cuda_ep_exchange.h with `wires` (dispatch bf16 or fp8, combine bf16 or f32), this rank's
// experts (uploaded as bf16, in slot order) on the CUDA permute and mma.sync grouped GEMMs over the
// received copies, the shared experts on the same kernels, added in the combine. The output equals the
// single-GPU layer within bf16 rounding (the partial sums are rounded to bf16 once on the way back); with an
// f32 combine wire only the order of fp32 additions differs (on one rank too: 1e-7 to 8e-7 relative); fp8
// within the host path's documented tolerance. max_batched_tokens: the most tokens of all ranks one forward takes (chunk_tokens);
// every workspace is sized for the largest slice of it (rank 0's), so every rank must pass the same value.
// The layer's forward takes host tensors (x [T_r, H] F32, rounded to bf16, through staging buffers of its
// own; synchronises) or device ones (x [T_r, H] BF16, topk and out on the device, T_r >= 1). Throws
// moe::Error for sizes or wires the GPU path lacks (hidden_size a multiple of 64, at most 1023 slots a rank).
EpLayer make_cuda_ep_layer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights,
                           Placement placement, EpWires wires, int64_t max_batched_tokens);
// The same on experts already on this rank's GPU (device_expert_slots.h: a migration's slots, or another
// layer's device_slots), shared rather than copied: no disk read, no host copy of an expert. weights gives
// the router and the shared experts only (its experts may be empty). slots: placement.rank_experts[rank]'s
// experts in that order, of this config's sizes (I padded to 64); throws moe::Error for others.
EpLayer make_cuda_ep_layer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights,
                           Placement placement, DeviceExpertSlots slots, EpWires wires, int64_t max_batched_tokens);

}  // namespace moe::ep
