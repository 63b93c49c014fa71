#pragma once
// The stages of a MoE layer: router -> prepare -> experts -> finalize (+ shared experts), each an interface
// with interchangeable implementations (local contiguous or padded dispatch, an all-to-all dispatch in
// expert parallelism; reference, optimised or GPU experts; local or all-to-all combine), so that N
// transports x M backends are N + M classes. MoeLayer (moe_layer.h) runs a bundle of them.
//
// Every stage takes tensors on its backend's device (host tensors on the CPU, Tensor::view(..., Device::cuda)
// on a GPU) and the Stream to queue its work on. A stage for a device NEVER synchronises the stream or
// allocates device memory in a call: its workspace is sized once, at construction, for a largest batch, and
// the tensors it returns are views into that workspace (valid until its next call), so that a whole forward
// can be captured in a CUDA graph. Host stages may allocate what they return.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moe/core/expert_batch.h"
#include "moe/core/stream.h"

namespace moe {

class MoeLayer;
struct LayerOutput;

// What the router stage produced for the later stages.
struct RouterOutput {
  TopK topk;      // [T, k] ids I32 and weights F32, written into the caller's tensors
  Tensor logits;  // [T, >= E] F32 when a later stage reads them (the CUDA finalize reads the sigmoid-gated
                  // shared expert's logit at column E); undefined otherwise
};

// Scores the experts for each token and picks its top k.
class Router {
 public:
  virtual ~Router() = default;
  // x [T, H] (F32 on the host, BF16 on a device) -> out.topk (preallocated [T, k]) and out.logits.
  virtual void route(const Tensor& x, RouterOutput& out, Stream stream = {}) = 0;
};

// Regroups the tokens by expert (in EP: the all-to-all dispatch).
class Prepare {
 public:
  virtual ~Prepare() = default;
  // x [T, H], topk [T, k] -> rows grouped by expert (expert_batch.h).
  virtual ExpertBatch prepare(const Tensor& x, const TopK& topk, Stream stream = {}) = 0;
};

// Runs every expert's FFN on its rows.
class Experts {
 public:
  virtual ~Experts() = default;
  // -> [n_rows, H] (F32 on the host, BF16 on a device), same row order as the batch; padding rows zero.
  virtual Tensor run(const ExpertBatch& batch, Stream stream = {}) = 0;
};

// Brings expert outputs back to token order and sums them with their weights (in EP: the combine).
class Finalize {
 public:
  virtual ~Finalize() = default;
  // expert_out [n_rows, H] -> out [T, H] F32 (preallocated; every element written). x [T, H] and `routed`
  // are there for a finalize that fuses the shared experts into its combine (CUDA's unpermute adds them);
  // the bundle then has no separate SharedExperts stage.
  virtual void finalize(const Tensor& x, const RouterOutput& routed, const Tensor& expert_out,
                        const ExpertBatch& batch, Tensor& out, Stream stream = {}) = 0;
};

// Experts and finalize as one stage: each expert's down projection accumulates straight into its tokens'
// output rows with the routing weight (no [n_rows, H] intermediate, no unpermute pass). It reads the token
// rows from x itself, so it needs only the batch's routing tables (expert_offsets/counts, row_token,
// pair_rows, pair_weights): an index-only prepare is enough.
class FusedExperts {
 public:
  virtual ~FusedExperts() = default;
  // x [T, H] F32; out [T, H] F32 += Σ_j pair_weights[t, j] · expert(x[t]) over the batch's kept pairs.
  virtual void run(const Tensor& x, const ExpertBatch& batch, Tensor& out, Stream stream = {}) = 0;
};

// The shared experts, after the finalize: out += shared(x), or += sigmoid(x · shared_gateᵀ) · shared(x).
class SharedExperts {
 public:
  virtual ~SharedExperts() = default;
  // x [T, H], out [T, H] F32 (updated in place).
  virtual void add(const Tensor& x, const RouterOutput& routed, Tensor& out, Stream stream = {}) = 0;
};

// The whole layer as one stage for small batches (CUDA's fused decode kernel: router, routed experts,
// combine and shared experts in one launch).
class FusedLayer {
 public:
  virtual ~FusedLayer() = default;
  // The largest batch it takes; the layer runs the stages above for larger ones.
  virtual int64_t max_tokens() const = 0;
  // x [T, H] -> topk [T, k] (preallocated), out [T, H] F32. Returns the batch's counters (routed_counts,
  // dropped_per_expert; capacity -1) for read_counts.
  virtual ExpertBatch forward(const Tensor& x, const TopK& topk, Tensor& out, Stream stream = {}) = 0;
};

// Per-expert counters of a forward, on the host.
struct LoadCounts {
  std::vector<int64_t> tokens_per_expert;   // [E] routed pairs
  std::vector<int64_t> dropped_per_expert;  // [E] pairs beyond capacity
  int64_t capacity = -1;
};

// The stages of one layer on one device, as the factories (cpu_stages.h, cuda_stages.h) or a caller build
// them. Either experts + finalize or fused is set; shared and small_batch are optional.
struct LayerStages {
  Device device = Device::cpu;  // where the stages' tensors live
  std::unique_ptr<Router> router;
  std::unique_ptr<Prepare> prepare;
  std::unique_ptr<Experts> experts;
  std::unique_ptr<Finalize> finalize;
  std::unique_ptr<FusedExperts> fused;
  std::unique_ptr<SharedExperts> shared;
  std::unique_ptr<FusedLayer> small_batch;
  // Device stages: copies a counters tensor ([E] I32 or I64) to the host after the work queued on `stream`
  // (synchronises it). Unset for host stages, whose tensors are read directly.
  std::function<std::vector<int64_t>(const Tensor&, Stream)> counts_to_host;
  // Device stages: MoeLayer::forward of host tensors (staging, copies to and from the device, synchronises).
  std::function<LayerOutput(MoeLayer&, const Tensor&)> host_forward;
  // What a forward of n_tokens runs, in words (the kernels and tiles a device backend chose); may be unset.
  std::function<std::string(int64_t)> describe_path;
  int64_t weight_bytes = 0;  // bytes of expert weights (routed and shared) the stages hold
  int64_t max_tokens = 0;    // largest batch of device stages (their workspace); 0: no limit (host)
};

// ceil(capacity_factor · n_tokens · top_k / n_experts): the rows per expert of the padded paradigm; throws
// for a factor that is not positive and finite.
int64_t expert_capacity(double capacity_factor, int64_t n_tokens, int top_k, int n_experts);

}  // namespace moe
