// The stages of expert parallelism on GPUs (make_cuda_ep_layer): the router and the shared experts on this
// rank's tokens, the exchange (cuda_ep_exchange.cpp) around this rank's experts, which run on the received
// copies with the single-GPU layer's kernels (permute, grouped GEMMs, unpermute). One state per rank holds
// the weights (its expert slots uploaded, or shared with the layer of another epoch) and every workspace
// (sized once, for the largest slice); each stage runs its part of the forward on it, in the order MoeLayer
// calls them:
//   router    router_fused (T <= kFusedRouterMaxTokens) or RouterGemm + router_topk   -> topk, logits
//   prepare   dispatch; permute of the received pairs over slots + 1 segments, tile map, unused masked
//   experts   gate+up with SwiGLU (rows gathered in the loads), then down                -> [pairs, H] bf16
//   finalize  unpermute into each copy's partial sum (bf16 for a bf16 wire); the shared experts; combine
#include <algorithm>
#include <chrono>
#include <vector>

#include "ep_kernels.h"
#include "moe/core/check.h"
#include "cuda/device_buffer.h"
#include "cuda/expert_upload.h"
#include "cuda/permute_workspace.h"
#include "cuda/router_gemm.h"
#include "ep/cuda_ep_exchange.h"
#include "ep/cuda_expert_slots.h"
#include "ep/data_parallel.h"
#include "ep/ep_layer.h"

namespace moe::ep {

namespace {

using cuda::DeviceBuffer;
using cuda::kFusedRouterMaxTokens;

cudaStream_t cuda_stream(Stream stream) { return static_cast<cudaStream_t>(stream.handle()); }

Tensor device_view(const void* data, DType dtype, std::vector<int64_t> shape) {
  return Tensor::view(const_cast<void*>(data), dtype, std::move(shape), nullptr, Device::cuda);
}

struct EpCudaState {
  MoeConfig config;
  int64_t H = 0, I = 0, S = 0, E = 0, k = 0, router_rows = 0, max_tokens = 0;
  int slots = 0;
  std::unique_ptr<CudaEpExchange> exchange;
  DeviceBuffer<float> router, bias;
  DeviceExpertSlots experts;  // this rank's, in slot order (shared with the layers of other epochs)
  const bf16* w13 = nullptr;  // experts.w13 [slots, 2I, H]
  const bf16* w2 = nullptr;   // experts.w2 [slots, H, I]
  DeviceBuffer<bf16> shared_w13, shared_w2;
  cuda::RouterGemm router_gemm;  // the router past kFusedRouterMaxTokens
  DeviceBuffer<float> logits;    // [max_tokens, router_rows x RouterGemm's terms]
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

  // slots: this rank's experts already on the GPU (shared, not copied); null: uploaded from weights.
  EpCudaState(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights, Placement placement,
              const DeviceExpertSlots* slots, EpWires wires, int64_t max_tokens);

  // Router on this rank's tokens: x [T, H] bf16 -> topk ids / weights [T, k]; returns the logits' row stride.
  int64_t route(const bf16* x, int64_t T, int32_t* topk_ids, float* topk_weights, cudaStream_t stream);
  // Dispatch, then the received pairs grouped by slot -> the batch over slots + 1 segments.
  ExpertBatch dispatch(const bf16* x, const int32_t* topk_ids, const float* topk_weights, int64_t T,
                       cudaStream_t stream);
  // This rank's experts on the received rows of `batch` -> [pairs, H] bf16 (rows_out).
  Tensor run_experts(const ExpertBatch& batch, cudaStream_t stream);
  // Each copy's partial sum, the shared experts on x [T, H], the combine -> out [T, H] fp32.
  void combine(const bf16* x, int64_t T, const float* logits, int64_t logits_stride, const ExpertBatch& batch,
               float* out, cudaStream_t stream);
  // The exchange of a rank without tokens: its peers' copies still come to its experts. Collective.
  void forward_without_tokens(cudaStream_t stream);
  ExchangeStats last_stats(cudaStream_t stream) const;
};

EpCudaState::EpCudaState(DeviceCommunicator& comm, const MoeConfig& cfg, const MoeWeights& weights,
                         Placement placement, const DeviceExpertSlots* slots, EpWires wires, int64_t max_tok) {
  EpCudaState& s = *this;
  routing::validate(cfg.router);
  s.config = cfg;
  s.H = cfg.hidden_size;
  // NOTE: s.I and s.S are the padded sizes the kernels run with (see upload_mlps).
  s.I = cuda::padded_intermediate(cfg.expert_intermediate_size);
  s.S = cfg.shared == SharedExpertKind::none ? 0 : cuda::padded_intermediate(cfg.shared_intermediate_size);
  s.E = cfg.router.n_experts;
  s.k = cfg.router.top_k;
  s.max_tokens = std::max<int64_t>(max_tok, 1);
  MOE_CHECK(s.H % 64 == 0, "expert parallelism on GPUs needs a hidden_size that is a multiple of 64, got {}: run "
            "this model's expert parallelism on the CPU (make_ep_layer)", s.H);
  check_placement(placement, static_cast<int>(s.E), comm.size());
  const std::vector<int32_t> mine = placement.rank_experts[comm.rank()];
  s.slots = static_cast<int>(mine.size());
  MOE_CHECK(s.slots + 1 <= 1024, "rank {} holds {} experts; the CUDA permute handles up to 1023 per rank", comm.rank(),
            s.slots);
  s.exchange = std::make_unique<CudaEpExchange>(comm, std::move(placement), wires, static_cast<int>(s.k), s.H,
                                                s.max_tokens);

  // Router in fp32, with the Qwen2 shared expert gate as one more row (as in the single-GPU layer).
  const bool gated = cfg.shared == SharedExpertKind::sigmoid_gated;
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
  if (slots) {
    check_device_slots(*slots, s.slots, s.H, s.I, "make_cuda_ep_layer");
    s.experts = *slots;
  } else {
    std::vector<const SwigluWeights*> experts;
    for (int32_t e : mine) experts.push_back(&weights.experts[e]);
    s.experts = upload_device_slots(experts, s.H, s.I);
  }
  s.w13 = static_cast<const bf16*>(s.experts.w13.data());
  s.w2 = static_cast<const bf16*>(s.experts.w2.data());
  if (s.S > 0) cuda::upload_mlps({&weights.shared}, s.H, s.S, s.shared_w13, s.shared_w2);

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

int64_t EpCudaState::route(const bf16* x, int64_t T, int32_t* topk_ids, float* topk_weights, cudaStream_t stream) {
  EpCudaState& s = *this;
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
  return logits_stride;
}

ExpertBatch EpCudaState::dispatch(const bf16* x, const int32_t* topk_ids, const float* topk_weights, int64_t T,
                                  cudaStream_t stream) {
  EpCudaState& s = *this;
  CudaEpExchange& ex = *s.exchange;
  ex.dispatch(x, topk_ids, topk_weights, T, stream);

  // This rank's slots over the received copies ("tokens" of the permute), the unused pairs in one extra
  // segment that the tile map leaves out.
  const int64_t n = ex.n_received(), rows = n * s.k;
  const int n_experts = s.slots + 1, k = static_cast<int>(s.k);
  const cuda::PermuteBuffers& pb = s.permute.buffers();
  cuda::TileMap tiles{};
  if (n > 0) {
    tiles = s.permute.tile_map(cuda::grouped_gemm_tile_rows(double(rows) / n_experts), rows);
    cuda::permute(ex.received_slots(), ex.received_weights(), n, k, n_experts, -1, false, pb, tiles, stream);
    cuda::build_tiles(pb.expert_offsets, pb.segment_counts, s.slots, tiles.tile_rows, tiles.tile_expert,
                      tiles.tile_row, tiles.n_tiles, tiles.max_tiles, stream);
    kernels::ep_mask_unused(ex.received_slots(), rows, s.slots, pb.pair_rows, stream);
  }
  ExpertBatch batch;
  batch.rows = device_view(ex.received_rows(), DType::BF16, {n, s.H});  // [n, H]: the permute gathers them
  batch.source = batch.rows;
  batch.row_token = device_view(pb.row_token, DType::I32, {rows});
  batch.expert_offsets = device_view(pb.expert_offsets, DType::I32, {n_experts});
  batch.expert_counts = device_view(pb.segment_counts, DType::I32, {n_experts});
  batch.routed_counts = device_view(pb.expert_counts, DType::I32, {s.slots});  // pairs served per slot
  batch.pair_rows = device_view(pb.pair_rows, DType::I32, {n, s.k});
  batch.pair_weights = device_view(pb.pair_weights, DType::F32, {n, s.k});
  batch.tile_expert = device_view(tiles.tile_expert, DType::I32, {tiles.max_tiles});
  batch.tile_row = device_view(tiles.tile_row, DType::I32, {tiles.max_tiles});
  batch.n_tiles = device_view(tiles.n_tiles, DType::I32, {1});
  batch.tile_rows = tiles.tile_rows;
  return batch;
}

Tensor EpCudaState::run_experts(const ExpertBatch& batch, cudaStream_t stream) {
  EpCudaState& s = *this;
  const int64_t rows = batch.row_token.numel();
  if (rows > 0) {
    cuda::GroupedGemmArgs up{.a = static_cast<const bf16*>(batch.rows.data()),
                             .gather = batch.row_token.data_as<int32_t>(), .b = s.w13, .c = s.act.get(),
                             .segment_offsets = batch.expert_offsets.data_as<int32_t>(),
                             .segment_counts = batch.expert_counts.data_as<int32_t>(),
                             .tile_expert = batch.tile_expert.data_as<int32_t>(),
                             .tile_row = batch.tile_row.data_as<int32_t>(),
                             .n_tiles = batch.n_tiles.data_as<int32_t>(), .max_tiles = batch.tile_expert.numel(),
                             .k = s.H, .n = s.I};
    cuda::grouped_gemm_swiglu(up, batch.tile_rows, stream);
    cuda::GroupedGemmArgs down = up;
    down.a = s.act.get();
    down.gather = nullptr;
    down.b = s.w2;
    down.c = s.rows_out.get();
    down.k = s.I;
    down.n = s.H;
    cuda::grouped_gemm(down, batch.tile_rows, stream);
  }
  return device_view(s.rows_out.get(), DType::BF16, {rows, s.H});  // [pairs, H]
}

void EpCudaState::combine(const bf16* x, int64_t T, const float* logits, int64_t logits_stride,
                          const ExpertBatch& batch, float* out, cudaStream_t stream) {
  EpCudaState& s = *this;
  CudaEpExchange& ex = *s.exchange;
  const int64_t n = batch.pair_rows.size(0);
  if (n > 0) {
    // Each copy's weighted sum over this rank's experts, rounded to bf16 for the way back unless the
    // combine wire is fp32.
    cuda::unpermute(s.rows_out.get(), batch.pair_rows.data_as<int32_t>(), batch.pair_weights.data_as<float>(), n,
                    static_cast<int>(s.k), s.H, nullptr, nullptr, 0, s.partial_f32.get(), stream);
    if (ex.combine_wire() == Transfer::bf16) cuda::f32_to_bf16(s.partial_f32.get(), s.partial.get(), n * s.H, stream);
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
  const float* gate_logit = gated ? logits + s.E : nullptr;
  if (ex.combine_wire() == Transfer::f32)
    ex.combine(s.partial_f32.get(), shared, gate_logit, logits_stride, out, stream);
  else
    ex.combine(s.partial.get(), shared, gate_logit, logits_stride, out, stream);
}

void EpCudaState::forward_without_tokens(cudaStream_t stream) {
  const ExpertBatch batch = dispatch(nullptr, nullptr, nullptr, 0, stream);
  run_experts(batch, stream);
  combine(nullptr, 0, logits.get(), router_rows, batch, nullptr, stream);
}

ExchangeStats EpCudaState::last_stats(cudaStream_t stream) const {
  ExchangeStats stats = exchange->stats();
  if (exchange->n_received() > 0) {
    std::vector<int32_t> counts(slots);
    if (slots > 0)
      MOE_CUDA_CHECK(cudaMemcpyAsync(counts.data(), permute.buffers().expert_counts, slots * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream));
    MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int32_t c : counts) stats.pairs_served += c;
  }
  return stats;
}

// The stages: each runs its part of the forward on the rank's state.
class EpCudaRouter final : public Router {
 public:
  explicit EpCudaRouter(std::shared_ptr<EpCudaState> s) : s_(std::move(s)) {}
  void route(const Tensor& x, RouterOutput& out, Stream stream) override {
    const int64_t T = x.size(0);
    const int64_t stride = s_->route(static_cast<const bf16*>(x.data()), T, out.topk.ids.data_as<int32_t>(),
                                     out.topk.weights.data_as<float>(), cuda_stream(stream));
    out.logits = device_view(s_->logits.get(), DType::F32, {T, stride});  // [T, stride]: the gate logit at E
  }

 private:
  std::shared_ptr<EpCudaState> s_;
};

class EpCudaDispatch final : public Prepare {
 public:
  explicit EpCudaDispatch(std::shared_ptr<EpCudaState> s) : s_(std::move(s)) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk, Stream stream) override {
    return s_->dispatch(static_cast<const bf16*>(x.data()), topk.ids.data_as<int32_t>(),
                        topk.weights.data_as<float>(), x.size(0), cuda_stream(stream));
  }

 private:
  std::shared_ptr<EpCudaState> s_;
};

class EpCudaExperts final : public Experts {
 public:
  explicit EpCudaExperts(std::shared_ptr<EpCudaState> s) : s_(std::move(s)) {}
  Tensor run(const ExpertBatch& batch, Stream stream) override { return s_->run_experts(batch, cuda_stream(stream)); }

 private:
  std::shared_ptr<EpCudaState> s_;
};

class EpCudaCombine final : public Finalize {
 public:
  explicit EpCudaCombine(std::shared_ptr<EpCudaState> s) : s_(std::move(s)) {}
  void finalize(const Tensor& x, const RouterOutput& routed, const Tensor&, const ExpertBatch& batch, Tensor& out,
                Stream stream) override {
    s_->combine(static_cast<const bf16*>(x.data()), x.size(0), routed.logits.data_as<float>(), routed.logits.size(1),
                batch, out.data_as<float>(), cuda_stream(stream));
  }

 private:
  std::shared_ptr<EpCudaState> s_;
};

// MoeLayer::forward of host tensors: staging buffers for the largest slice, the legacy default stream.
struct HostStaging {
  DeviceBuffer<uint16_t> x;         // [max_tokens, H] bf16
  DeviceBuffer<float> out, weights; // [max_tokens, H], [max_tokens, k]
  DeviceBuffer<int32_t> ids;        // [max_tokens, k]
};

LayerOutput host_forward(EpCudaState& s, HostStaging& staging, MoeLayer& layer, const Tensor& input) {
  const int64_t H = s.H, k = s.k;
  const Tensor x = layer_input_f32(input, H).to(DType::BF16);  // [T, H]
  const int64_t T = x.size(0);
  MOE_CHECK(T <= s.max_tokens, "{} tokens exceed the workspace of {} (max_tokens)", T, s.max_tokens);
  const Stream stream = Stream::cuda(nullptr);
  LayerOutput out;
  out.hidden_states = Tensor::empty(DType::F32, {T, H});
  out.topk.ids = Tensor::empty(DType::I32, {T, k});
  out.topk.weights = Tensor::empty(DType::F32, {T, k});
  if (T > 0) staging.x.upload(x.data_as<uint16_t>(), T * H);
  const auto start = std::chrono::steady_clock::now();
  if (T > 0) {
    const TopK topk{.ids = device_view(staging.ids.get(), DType::I32, {T, k}),
                    .weights = device_view(staging.weights.get(), DType::F32, {T, k})};
    Tensor y = device_view(staging.out.get(), DType::F32, {T, H});
    layer.forward(device_view(staging.x.get(), DType::BF16, {T, H}), topk, y, stream);
  } else {
    // NOTE: MoeLayer::forward enqueues nothing for a device batch of no tokens; this rank's exchange must
    // still run.
    s.forward_without_tokens(nullptr);
  }
  MOE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  out.timings.experts_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (T > 0) {
    MOE_CUDA_CHECK(cudaMemcpy(out.hidden_states.data(), staging.out.get(), out.hidden_states.nbytes(),
                              cudaMemcpyDeviceToHost));
    MOE_CUDA_CHECK(cudaMemcpy(out.topk.ids.data(), staging.ids.get(), out.topk.ids.nbytes(), cudaMemcpyDeviceToHost));
    MOE_CUDA_CHECK(cudaMemcpy(out.topk.weights.data(), staging.weights.get(), out.topk.weights.nbytes(),
                              cudaMemcpyDeviceToHost));
  }
  out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T,
                                          static_cast<int>(k), static_cast<int>(s.E));
  return out;
}

EpLayer make_layer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights, Placement placement,
                   const DeviceExpertSlots* slots, EpWires wires, int64_t max_batched_tokens) {
  MOE_CHECK(max_batched_tokens >= 1, "max_batched_tokens must be at least 1, got {}", max_batched_tokens);
  // Every rank sizes its buffers for the largest slice (rank 0's), so that what a peer sends always fits.
  const int64_t max_local = std::max<int64_t>(token_range(max_batched_tokens, 0, comm.size()).end, 1);
  auto state = std::make_shared<EpCudaState>(comm, config, weights, std::move(placement), slots, wires, max_local);
  auto staging = std::make_shared<HostStaging>();
  staging->x = DeviceBuffer<uint16_t>(max_local * state->H);
  staging->out = DeviceBuffer<float>(max_local * state->H);
  staging->weights = DeviceBuffer<float>(max_local * state->k);
  staging->ids = DeviceBuffer<int32_t>(max_local * state->k);

  LayerStages stages;
  stages.device = Device::cuda;
  stages.router = std::make_unique<EpCudaRouter>(state);
  stages.prepare = std::make_unique<EpCudaDispatch>(state);
  stages.experts = std::make_unique<EpCudaExperts>(state);
  stages.finalize = std::make_unique<EpCudaCombine>(state);
  stages.counts_to_host = [](const Tensor& counts, Stream stream) {
    std::vector<int32_t> host(counts.numel());
    if (!host.empty())
      MOE_CUDA_CHECK(cudaMemcpyAsync(host.data(), counts.data(), host.size() * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, cuda_stream(stream)));
    MOE_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(stream)));
    return std::vector<int64_t>(host.begin(), host.end());
  };
  stages.host_forward = [state, staging](MoeLayer& layer, const Tensor& x) {
    return host_forward(*state, *staging, layer, x);
  };
  stages.weight_bytes = static_cast<int64_t>(state->experts.w13.nbytes() + state->experts.w2.nbytes() +
                                             (state->shared_w13.size() + state->shared_w2.size()) * sizeof(bf16));
  stages.max_tokens = max_local;
  return {.host = &comm.host(),
          .layer = std::make_unique<MoeLayer>(config, std::move(stages)),
          .last_stats = [state] { return state->last_stats(nullptr); },
          .chunk_tokens = max_batched_tokens,
          .device_slots = state->experts};
}

}  // namespace

EpLayer make_cuda_ep_layer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights,
                           Placement placement, EpWires wires, int64_t max_batched_tokens) {
  return make_layer(comm, config, weights, std::move(placement), nullptr, wires, max_batched_tokens);
}

EpLayer make_cuda_ep_layer(DeviceCommunicator& comm, const MoeConfig& config, const MoeWeights& weights,
                           Placement placement, DeviceExpertSlots slots, EpWires wires, int64_t max_batched_tokens) {
  return make_layer(comm, config, weights, std::move(placement), &slots, wires, max_batched_tokens);
}

}  // namespace moe::ep
