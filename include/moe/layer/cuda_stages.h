#pragma once
// The local stages on one GPU (the CUDA ops of cuda/ops.h): the fp32 router (one fused launch for small
// batches, RouterGemm + top-k otherwise), the permute with the grouped GEMMs' tile map, the grouped GEMMs
// (mma.sync or wgmma, gate+up with SwiGLU fused, then down), and the weighted combine with the shared
// experts added; batches of up to the decode limit run the fused decode kernel instead. Weights are uploaded
// and every workspace sized once, for max_tokens, at construction: a forward enqueues on its stream only
// (no allocation, no synchronisation) and can be captured in a CUDA graph.
// This header needs no CUDA headers: the stages take device tensors and a Stream (core/stream.h).

#include <cstdint>

#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"
#include "moe/layer/stages.h"

namespace moe {

struct CudaLayerOptions {
  int64_t max_tokens = 8192;
  Paradigm paradigm = Paradigm::contiguous;
  double capacity_factor = 1.0;
  OverflowPolicy overflow = OverflowPolicy::drop;
};

// Uploads the weights (experts as bf16, the router in fp32) to the current device and sizes the workspace.
// With config.quant fp8_block the experts get an fp8 copy too (e4m3, one fp32 scale per 128x128 block,
// quantised on the device from the bf16 upload), which the fused decode path streams at half the bytes; the
// grouped GEMMs of larger batches run on the bf16 experts.
// Throws moe::Error for sizes the kernels do not handle (hidden_size must be a multiple of 64; expert and
// shared intermediate sizes are zero-padded to a multiple of 64 at upload, which is exact).
// MoeLayer's device forward of these stages takes x [T, H] BF16 on the device, T <= max_tokens, and a
// Stream::cuda. Its host forward (the host-tensor convenience path) sends x up as bf16 in chunks of at most
// max_tokens through pinned staging and a stream of its own, brings out, topk and the load statistics back
// as host tensors (timings.experts_ms: the device time of the forwards), and synchronises.
LayerStages make_cuda_stages(const MoeConfig& config, const MoeWeights& weights, CudaLayerOptions options = {});

// MoeLayer's device forward (of these stages) with its outputs made on `stream`'s device: x [T, H] BF16 on
// the device, any T (run in chunks of max_tokens) -> hidden_states [T, H] F32 and topk [T, k] there; stats
// and timings are left empty. Nothing is copied to the host and nothing synchronises. With `topk_into` ([T, k]
// I32 and F32 on the device) the routing is written there and returned as those tensors.
LayerOutput forward_device_tensors(MoeLayer& layer, const Tensor& x, Stream stream, const TopK* topk_into = nullptr);

// Whether a CUDA device is present and usable by this process.
bool cuda_device_available();

}  // namespace moe
