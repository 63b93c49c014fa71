// The expert-parallel MoE block on GPUs: the router and the shared experts on this rank's tokens, the
// exchange (cuda_ep_exchange.cpp) around this rank's experts, which run on the received copies with the
// single-GPU layer's kernels (permute, grouped GEMMs, unpermute).

#include <algorithm>
#include <cstring>
#include <vector>

#include "ep_kernels.h"
#include "moe/core/check.h"
#include "moe/cuda/device_buffer.h"
#include "moe/cuda/expert_upload.h"
#include "moe/cuda/permute_workspace.h"
#include "moe/cuda/router_gemm.h"
#include "moe/ep/cuda_ep.h"

namespace moe::ep {

using cuda::DeviceBuffer;
using cuda::padded_intermediate;
using cuda::upload_mlps;

using cuda::kFusedRouterMaxTokens;

struct CudaEpMoeLayer::State {
  MoeConfig config;
  int64_t H = 0, I = 0, S = 0, E = 0, k = 0, router_rows = 0, max_tokens = 0;
  int slots = 0;
  std::unique_ptr<CudaEpExchange> exchange;
  DeviceBuffer<float> router, bias;
  DeviceBuffer<bf16> w13, w2, shared_w13, shared_w2;
  cuda::RouterGemm router_gemm;  // the router past kFusedRouterMaxTokens
  DeviceBuffer<float> logits;     // [max_tokens, router_rows x RouterGemm's terms]
  DeviceBuffer<unsigned> arrivals;
  // local experts over the received copies: [max_received * k] pairs of slots + 1 experts (the last one
  // holds the unused pairs and is never computed)
  cuda::PermuteWorkspace permute;
  DeviceBuffer<float> partial_f32;
  DeviceBuffer<bf16> act, rows_out, partial;
  int64_t max_pairs = 0;
  // shared experts [max_tokens]
  DeviceBuffer<bf16> shared_act, shared_out;
  DeviceBuffer<int32_t> shared_ints;
  int64_t n_tokens = 0;
};

CudaEpMoeLayer::CudaEpMoeLayer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights,
                               Placement placement, EpWires wires, int64_t max_tokens)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  routing::validate(config.router);
  s.config = config;
  s.H = config.hidden_size;
  // NOTE: s.I and s.S are the padded sizes the kernels run with (see upload_mlps).
  s.I = padded_intermediate(config.expert_intermediate_size);
  s.S = config.shared == SharedExpertKind::none ? 0 : padded_intermediate(config.shared_intermediate_size);
  s.E = config.router.n_experts;
  s.k = config.router.top_k;
  s.max_tokens = std::max<int64_t>(max_tokens, 1);
  MOE_CHECK(s.H % 64 == 0, "expert parallelism on GPUs needs a hidden_size that is a multiple of 64, got {}: run "
            "this model's expert parallelism on the CPU", s.H);
  check_placement(placement, static_cast<int>(s.E), comm.size());
  const std::vector<int32_t> mine = placement.rank_experts[comm.rank()];
  s.slots = static_cast<int>(mine.size());
  MOE_CHECK(s.slots + 1 <= 1024, "rank {} holds {} experts; the CUDA permute handles up to 1023 per rank", comm.rank(),
            s.slots);
  s.exchange = std::make_unique<CudaEpExchange>(comm, std::move(placement), wires, static_cast<int>(s.k), s.H,
                                                s.max_tokens);

  // Router in fp32, with the Qwen2 shared expert gate as one more row (as in CudaMoeLayer).
  const bool gated = config.shared == SharedExpertKind::sigmoid_gated;
  s.router_rows = s.E + (gated ? 1 : 0);
  std::vector<float> router(s.router_rows * s.H);
  std::copy_n(weights.router.to_f32().data_as<float>(), s.E * s.H, router.begin());
  if (gated) std::copy_n(weights.shared_gate.to_f32().data_as<float>(), s.H, router.begin() + s.E * s.H);
  s.router = DeviceBuffer<float>(router.size());
  s.router.upload(router.data(), router.size());
  if (s.max_tokens > kFusedRouterMaxTokens) s.router_gemm = cuda::RouterGemm(router.data(), s.router_rows, s.H);
  if (weights.correction_bias.defined()) {
    s.bias = DeviceBuffer<float>(s.E);
    s.bias.upload(weights.correction_bias.to_f32().data_as<float>(), s.E);
  }
  // Only this rank's experts, in slot order.
  std::vector<const SwigluWeights*> experts;
  for (int32_t e : mine) experts.push_back(&weights.experts[e]);
  if (!experts.empty()) upload_mlps(experts, s.H, s.I, s.w13, s.w2);
  if (s.S > 0) upload_mlps({&weights.shared}, s.H, s.S, s.shared_w13, s.shared_w2);

  const int64_t Tm = s.max_tokens;
  s.logits = cuda::router_logits_buffer(Tm, s.router_rows, s.router_gemm);
  s.arrivals = DeviceBuffer<unsigned>(Tm);
  MOE_CUDA_CHECK(cudaMemset(s.arrivals.get(), 0, Tm * sizeof(unsigned)));

  const int64_t n_experts = s.slots + 1;  // the last: unused pairs
  s.max_pairs = Tm * comm.size() * s.k;
  s.permute = cuda::PermuteWorkspace(n_experts, s.max_pairs, s.max_pairs);
  s.act = DeviceBuffer<bf16>(s.max_pairs * s.I);
  s.rows_out = DeviceBuffer<bf16>(s.max_pairs * s.H);
  const int64_t max_received = Tm * comm.size();
  s.partial_f32 = DeviceBuffer<float>(max_received * s.H);
  if (wires.combine == Transfer::bf16) s.partial = DeviceBuffer<bf16>(max_received * s.H);
  if (s.S > 0) {
    s.shared_act = DeviceBuffer<bf16>(Tm * s.S);
    s.shared_out = DeviceBuffer<bf16>(Tm * s.H);
    s.shared_ints = DeviceBuffer<int32_t>(2 + 2 * (Tm + 1) + 1);
  }

  MOE_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaEpMoeLayer::~CudaEpMoeLayer() = default;

void CudaEpMoeLayer::forward(const bf16* x, int64_t T, float* out, int32_t* topk_ids, float* topk_weights,
                             cudaStream_t stream) {
  State& s = *state_;
  MOE_CHECK(T >= 0 && T <= s.max_tokens, "{} tokens exceed the workspace of {} (max_tokens)", T, s.max_tokens);
  s.n_tokens = T;
  const int k = static_cast<int>(s.k);

  // Router on this rank's tokens.
  int64_t logits_stride = s.router_rows;  // RouterGemm: its parts side by side, summed into the first
  if (T > 0 && T <= kFusedRouterMaxTokens) {
    cuda::router_fused(s.config.router, x, s.H, s.router.get(), s.router_rows, s.bias.get(), T, s.logits.get(),
                       s.arrivals.get(), topk_ids, topk_weights, stream);
  } else if (T > 0) {
    logits_stride = s.router_rows * s.router_gemm.terms();
    s.router_gemm.run(x, T, s.logits.get(), stream);
    cuda::router_topk(s.config.router, s.logits.get(), logits_stride, s.router_gemm.terms(), s.bias.get(), T,
                      topk_ids, topk_weights, stream);
  }

  CudaEpExchange& ex = *s.exchange;
  ex.dispatch(x, topk_ids, topk_weights, T, stream);

  // This rank's experts over the received copies ("tokens" of the permute), the unused pairs in one extra
  // segment that the tile map leaves out.
  const int64_t n = ex.n_received();
  if (n > 0) {
    const int n_experts = s.slots + 1;
    const int64_t rows = n * k;
    const cuda::TileMap tiles = s.permute.tile_map(cuda::grouped_gemm_tile_rows(double(rows) / n_experts), rows);
    const cuda::PermuteBuffers& pb = s.permute.buffers();
    cuda::permute(ex.received_slots(), ex.received_weights(), n, k, n_experts, -1, false, pb, tiles, stream);
    cuda::build_tiles(pb.expert_offsets, pb.segment_counts, s.slots, tiles.tile_rows, tiles.tile_expert,
                      tiles.tile_row, tiles.n_tiles, tiles.max_tiles, stream);
    kernels::ep_mask_unused(ex.received_slots(), rows, s.slots, pb.pair_rows, stream);
    cuda::GroupedGemmArgs up{.a = ex.received_rows(), .gather = pb.row_token, .b = s.w13.get(), .c = s.act.get(),
                             .segment_offsets = pb.expert_offsets, .segment_counts = pb.segment_counts,
                             .tile_expert = tiles.tile_expert, .tile_row = tiles.tile_row, .n_tiles = tiles.n_tiles,
                             .max_tiles = tiles.max_tiles, .k = s.H, .n = s.I};
    cuda::grouped_gemm_swiglu(up, tiles.tile_rows, stream);
    cuda::GroupedGemmArgs down = up;
    down.a = s.act.get();
    down.gather = nullptr;
    down.b = s.w2.get();
    down.c = s.rows_out.get();
    down.k = s.I;
    down.n = s.H;
    cuda::grouped_gemm(down, tiles.tile_rows, stream);
    // Each copy's weighted sum over this rank's experts, rounded to bf16 for the way back unless the
    // combine wire is fp32.
    cuda::unpermute(s.rows_out.get(), pb.pair_rows, pb.pair_weights, n, k, s.H, nullptr, nullptr, 0,
                    s.partial_f32.get(), stream);
    if (ex.combine_wire() == Transfer::bf16)
      cuda::f32_to_bf16(s.partial_f32.get(), s.partial.get(), n * s.H, stream);
  }

  // Shared experts on this rank's tokens (replicated on every rank).
  const bf16* shared = nullptr;
  if (s.S > 0 && T > 0) {
    int32_t* offsets = s.shared_ints.get();
    int32_t* counts = offsets + 1;
    int32_t* tile_expert = offsets + 2;
    int32_t* tile_row = tile_expert + (s.max_tokens + 1);
    int32_t* n_tiles = tile_row + (s.max_tokens + 1);
    const int rows = cuda::grouped_gemm_tile_rows(double(T));
    const int64_t n_shared_tiles = (T + rows - 1) / rows;
    cuda::dense_segment(offsets, counts, T, stream);
    cuda::build_tiles(offsets, counts, 1, rows, tile_expert, tile_row, n_tiles, n_shared_tiles, stream);
    cuda::GroupedGemmArgs sup{.a = x, .gather = nullptr, .b = s.shared_w13.get(), .c = s.shared_act.get(),
                              .segment_offsets = offsets, .segment_counts = counts, .tile_expert = tile_expert,
                              .tile_row = tile_row, .n_tiles = n_tiles, .max_tiles = n_shared_tiles, .k = s.H,
                              .n = s.S};
    cuda::grouped_gemm_swiglu(sup, rows, stream);
    cuda::GroupedGemmArgs sdown = sup;
    sdown.a = s.shared_act.get();
    sdown.b = s.shared_w2.get();
    sdown.c = s.shared_out.get();
    sdown.k = s.S;
    sdown.n = s.H;
    cuda::grouped_gemm(sdown, rows, stream);
    shared = s.shared_out.get();
  }
  const bool gated = s.config.shared == SharedExpertKind::sigmoid_gated;
  const float* gate_logit = gated ? s.logits.get() + s.E : nullptr;
  if (ex.combine_wire() == Transfer::f32)
    ex.combine(s.partial_f32.get(), shared, gate_logit, logits_stride, out, stream);
  else
    ex.combine(s.partial.get(), shared, gate_logit, logits_stride, out, stream);
}

ExchangeStats CudaEpMoeLayer::stats(cudaStream_t stream) const {
  const State& s = *state_;
  ExchangeStats stats = s.exchange->stats();
  if (s.exchange->n_received() > 0) {
    std::vector<int32_t> counts(s.slots);
    if (s.slots > 0)
      MOE_CUDA_CHECK(cudaMemcpyAsync(counts.data(), s.permute.buffers().expert_counts, s.slots * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream));
    MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int32_t c : counts) stats.pairs_served += c;
  }
  return stats;
}

}  // namespace moe::ep
