#pragma once
// The exchange of expert parallelism on GPUs: one GPU per rank, token rows moved device to device
// (DeviceCommunicator, NCCL), never staged through the host. The same dispatch/combine contract as the
// host exchange (dispatch_combine.h):
//   dispatch  route on the device; one copy of a token per destination rank (however many of its experts
//             live there) with its (slot, weight) pairs; copies per destination counted on the device and
//             exchanged, then copied to the host (the one synchronisation of a forward: NCCL needs the sizes
//             on the host); rows (bf16, or fp8 e4m3 with one fp32 scale per 128 values, the host path's wire
//             format) and pairs by all-to-all-v
//   combine   each copy's weighted partial sum goes back to its source as bf16 (the default) or fp32 (the
//             combine wire), which adds the partials of a token in ascending rank order (fp32) plus its
//             shared experts
// The stages of the one MoeLayer over it: make_cuda_ep_layer (ep_layer.h). Because of the host
// synchronisation a forward through it cannot be captured in a CUDA graph.

#include <cstdint>
#include <memory>

#include "cuda/ops.h"
#include "ep/device_communicator.h"
#include "ep/dispatch_combine.h"
#include "ep/placement.h"
#include "ep/transfer.h"

namespace moe::ep {

using cuda::bf16;

class CudaEpExchange {
 public:
  // Buffers sized for up to max_tokens tokens per rank. wires: dispatch bf16 or fp8 (the rows are bf16
  // already; f32 is refused), combine bf16 or f32 (fp8 is refused). hidden: a multiple of 64.
  CudaEpExchange(DeviceCommunicator& comm, Placement placement, EpWires wires, int top_k, int64_t hidden,
                 int64_t max_tokens);
  ~CudaEpExchange();
  CudaEpExchange(const CudaEpExchange&) = delete;
  CudaEpExchange& operator=(const CudaEpExchange&) = delete;

  // x [T, H] bf16, topk_ids [T, k] logical experts, topk_weights [T, k], on the device. Collective.
  void dispatch(const bf16* x, const int32_t* topk_ids, const float* topk_weights, int64_t n_tokens,
                cudaStream_t stream);
  // What the last dispatch received, on the device: n copies, their rows [n, H] bf16, their local slot ids
  // [n, k] (unused pairs: local_slots()) and weights [n, k] (unused: 0).
  int64_t n_received() const;
  const bf16* received_rows() const;
  const int32_t* received_slots() const;
  const float* received_weights() const;
  // partial [n_received, H] in the combine wire's type (bf16 or fp32; the other is refused) -> out [T, H]
  // fp32 of the last dispatch's tokens, plus shared [T, H] bf16 (optional) scaled by
  // sigmoid(shared_gate_logit[t * gate_stride]) (optional). Collective.
  void combine(const bf16* partial, const bf16* shared, const float* shared_gate_logit, int64_t gate_stride,
               float* out, cudaStream_t stream);
  void combine(const float* partial, const bf16* shared, const float* shared_gate_logit, int64_t gate_stride,
               float* out, cudaStream_t stream);

  // The last dispatch (and combine): pairs_served is left 0 (the experts count it).
  const ExchangeStats& stats() const;
  int64_t dispatch_bytes_sent() const;  // rows + pairs to other ranks
  int64_t combine_bytes_sent() const;   // partial sums to other ranks
  Transfer combine_wire() const;
  int local_slots() const;
  const Placement& placement() const;

 private:
  // Both combines: partial's element type must be the combine wire's.
  void combine_partials(const void* partial, Transfer type, const bf16* shared, const float* shared_gate_logit,
                        int64_t gate_stride, float* out, cudaStream_t stream);

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace moe::ep
