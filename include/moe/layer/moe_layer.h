#pragma once
// One MoE block: router -> prepare -> experts -> finalize (+ shared experts), run through the stage
// interfaces of stages.h on whichever device the bundle of stages lives (cpu_stages.h, cuda_stages.h, or a
// bundle a caller assembles: an expert-parallel transport, a test's stage).

#include <memory>
#include <string>

#include "moe/layer/cpu_stages.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "moe/layer/stages.h"
#include "moe/routing/load_stats.h"

namespace moe {

// Wall-clock milliseconds of each stage of one forward. With the fast CPU experts, experts_ms covers the
// experts and the fused finalize (finalize_ms is 0), and shared_ms the shared expert on the same kernels.
// The host forward of device stages times the whole forward with device events into experts_ms.
struct LayerTimings {
  double router_ms = 0, prepare_ms = 0, experts_ms = 0, finalize_ms = 0, shared_ms = 0;
  double total_ms() const { return router_ms + prepare_ms + experts_ms + finalize_ms + shared_ms; }
};

struct LayerOutput {
  Tensor hidden_states;  // [T, H] F32: routed experts' weighted sum + shared experts
  TopK topk;             // the router's choices and weights (before any capacity drop)
  routing::LoadStats stats;
  LayerTimings timings;
};

// x [T, H] (F32, BF16 or F16) as F32, checked for its shape and for NaN/Inf (moe::Error naming the token).
Tensor layer_input_f32(const Tensor& x, int64_t hidden);

// Throws moe::Error naming `block` (e.g. "layer 3") when out [T, H] F32 holds NaN/Inf, e.g. from a NaN in a
// checkpoint's weights. It names the expert when one alone explains it (every non-finite token used it, no
// finite token did), and the router or the shared experts when the choices hold no such expert.
void check_output_finite(const Tensor& out, const TopK& topk, const std::string& block);

class MoeLayer {
 public:
  // The local CPU stages (make_cpu_stages): the expert weights are repacked here when options.cpu_experts
  // is fast (the checkpoint views are then released).
  MoeLayer(MoeConfig config, MoeWeights weights, LayerOptions options = {});
  // Any bundle: either experts + finalize or fused must be set, and a router and a prepare.
  MoeLayer(MoeConfig config, LayerStages stages);

  // Host tensors in and out on any device: x [T, H] F32, BF16 or F16. Host stages run here, timed per
  // stage; device stages through their host path (stages.host_forward: staging copies, synchronises).
  // Throws moe::Error for a wrong shape or a NaN/Inf input.
  LayerOutput forward(const Tensor& x);

  // On the stages' device, enqueued on `stream` (device stages neither allocate nor synchronise: a CUDA
  // forward can be captured in a graph). x [T, H] (F32 on the host, BF16 on a device), T <= max_tokens();
  // topk [T, k] (I32 ids, F32 weights) and out [T, H] F32 preallocated there. Not checked for NaN/Inf.
  void forward(const Tensor& x, const TopK& topk, Tensor& out, Stream stream = {});

  // The counters of the last forward on the host (synchronises `stream` for device stages).
  LoadCounts read_counts(Stream stream = {}) const;
  // What a forward of n_tokens runs, in words (device stages: the fused decode kernel, or the grouped
  // GEMMs' kernel and tiles); empty where the stages do not say.
  std::string describe_path(int64_t n_tokens) const;
  // Bytes of expert weights (routed and shared) the stages hold; 0 where they do not say.
  int64_t weight_bytes() const { return stages_.weight_bytes; }
  Device device() const { return stages_.device; }
  // The largest batch of device stages (their workspace); 0: no limit.
  int64_t max_tokens() const { return stages_.max_tokens; }
  const MoeConfig& config() const { return config_; }

 private:
  // The stages on x; the batch's counters are kept for read_counts. timings may be null.
  void run(const Tensor& x, const TopK& topk, Tensor& out, Stream stream, LayerTimings* timings);

  MoeConfig config_;
  LayerStages stages_;
  ExpertBatch last_;  // the counters of the last forward (routed_counts, dropped_per_expert, capacity)
};

}  // namespace moe
