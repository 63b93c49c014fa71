#pragma once
// The whole MoE layer on one GPU: gate GEMM (cuBLAS, fp32), router top-k, permute, grouped GEMMs
// (gate+up with SwiGLU fused, then down), shared experts and the weighted combine. The C++ API for
// embedding: device pointers and a stream in, no host synchronisation inside forward, every buffer from a
// workspace sized once for max_tokens, so a forward can be captured in a CUDA graph and replayed.

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe/cuda/ops.h"
#include "moe/layer/modular.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"

namespace moe::cuda {

struct CudaLayerOptions {
  int64_t max_tokens = 8192;
  Paradigm paradigm = Paradigm::contiguous;
  double capacity_factor = 1.0;
  OverflowPolicy overflow = OverflowPolicy::drop;
};

// Per-expert counters of the last forward, copied to the host.
struct DeviceLoadCounts {
  std::vector<int64_t> tokens_per_expert;   // [E] routed pairs
  std::vector<int64_t> dropped_per_expert;  // [E] pairs beyond capacity
  int64_t capacity = -1;
};

class CudaMoeLayer {
 public:
  // Uploads the weights (experts as bf16, the router in fp32) to the current device and sizes the
  // workspace. Throws moe::Error for sizes the kernels do not handle (hidden_size must be a multiple of 64;
  // expert and shared intermediate sizes are zero-padded to a multiple of 64 at upload, which is exact).
  CudaMoeLayer(const MoeConfig& config, const MoeWeights& weights, CudaLayerOptions options = {});
  ~CudaMoeLayer();
  CudaMoeLayer(const CudaMoeLayer&) = delete;
  CudaMoeLayer& operator=(const CudaMoeLayer&) = delete;

  // x [T, H] bf16 -> out [T, H] fp32, topk_ids [T, k] int32, topk_weights [T, k] fp32, all on the device.
  // T <= max_tokens. Enqueues on `stream` only.
  void forward(const bf16* x, int64_t n_tokens, float* out, int32_t* topk_ids, float* topk_weights,
               cudaStream_t stream);

  // The counters of the last forward (synchronises `stream`).
  DeviceLoadCounts read_counts(cudaStream_t stream) const;

  // What forward(n_tokens) runs, in words: the fused decode kernel, or the routed grouped GEMMs' kernel,
  // tile height and staged epilogues, and whether the tuned table (tuned_tiles.h) or the policy chose them.
  std::string describe_path(int64_t n_tokens) const;

  const MoeConfig& config() const;
  // Bytes of expert weights (routed and shared) on the device.
  int64_t weight_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace moe::cuda
