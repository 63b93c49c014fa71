#include "moe/cuda/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "moe/cuda/device_buffer.h"
#include "moe/cuda/expert_upload.h"
#include "moe/cuda/permute_workspace.h"
#include "moe/cuda/router_gemm.h"
#include "moe/cuda/tuned_tiles.h"
#include "moe/core/float_convert.h"

namespace moe::cuda {

namespace {

int64_t capacity_for(const CudaLayerOptions& o, int64_t n_tokens, int top_k, int n_experts) {
  return o.paradigm == Paradigm::padded ? expert_capacity(o.capacity_factor, n_tokens, top_k, n_experts) : -1;
}

// What one forward of a batch runs past the router: forward runs it and describe_path names it, so the two
// cannot drift apart.
struct RoutedPath {
  bool decode = false;    // the fused decode kernel runs the whole layer; nothing below applies
  int64_t capacity = -1;  // per-expert rows in the padded paradigm, -1 in the contiguous one
  int64_t rows = 0;       // rows of the grouped GEMMs
  RoutedGemmPlan plan;    // tile height, kernel and staged epilogues asked for
  bool wgmma = false;     // the wgmma kernels run (asked for, and the gathered buffer they read exists)
  int tile_rows = 0;      // the tile height actually run (128 for wgmma)
};

}  // namespace

struct CudaMoeLayer::State {
  MoeConfig config;
  CudaLayerOptions options;
  int64_t H, I, S, E, k, router_rows;
  // weights
  DeviceBuffer<float> router;  // [router_rows, H]: E expert rows (+ the Qwen2 shared expert gate row)
  DeviceBuffer<float> bias;    // [E]
  DeviceBuffer<bf16> w13, w2, shared_w13, shared_w2;
  // workspace
  RouterGemm router_gemm;  // the router of the batches fused_router_takes leaves
  DeviceBuffer<float> logits;
  PermuteWorkspace permute;
  DeviceBuffer<int32_t> ints;  // the other int32 scratch arrays, carved below
  DeviceBuffer<bf16> act, rows_out, shared_act, shared_out;
  DeviceBuffer<bf16> gathered;  // [max_rows, H] token rows in expert order, for the wgmma kernel's TMA loads
  DeviceBuffer<int32_t> wgmma_scheduler;  // the wgmma kernels' work-unit queue (all launches of this layer)
  unsigned* arrivals = nullptr;  // [max_tokens] counters of the fused router (one per 8 tokens), zero between launches
  int32_t *shared_offsets = nullptr, *shared_counts = nullptr, *shared_tile_expert = nullptr,
          *shared_tile_row = nullptr, *shared_n_tiles = nullptr;
  int64_t max_rows = 0, last_capacity = -1;
  // The fused decode path (decode.cu), for batches of up to decode_limit tokens in the contiguous paradigm.
  int64_t decode_limit = 0;
  DeviceBuffer<float> decode_logits;
  DeviceBuffer<bf16> decode_act;
  DeviceBuffer<unsigned> decode_barrier;
  DecodeScratch decode{};

  RoutedPath path(int64_t n_tokens) const {
    RoutedPath r;
    r.decode = n_tokens <= decode_limit;
    if (r.decode) return r;
    r.capacity = capacity_for(options, n_tokens, static_cast<int>(k), static_cast<int>(E));
    r.rows = r.capacity < 0 ? n_tokens * k : E * r.capacity;
    r.plan = routed_gemm_plan(E, k, I, H, n_tokens, r.capacity);
    // The wgmma kernel reads A through a tensor map, which cannot gather: without the gathered buffer
    // (sized at construction) the mma.sync kernels run instead.
    r.wgmma = r.plan.kernel == GroupedGemmKernel::wgmma && gathered.size() > 0;
    r.tile_rows = r.wgmma ? 128 : r.plan.tile_rows;
    return r;
  }
};

CudaMoeLayer::CudaMoeLayer(const MoeConfig& config, const MoeWeights& weights, CudaLayerOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = config;
  s.options = options;
  s.H = config.hidden_size;
  // NOTE: s.I and s.S are the padded sizes the kernels run with (see upload_mlps).
  s.I = padded_intermediate(config.expert_intermediate_size);
  s.S = config.shared == SharedExpertKind::none ? 0 : padded_intermediate(config.shared_intermediate_size);
  s.E = config.router.n_experts;
  s.k = config.router.top_k;
  routing::validate(config.router);
  MOE_CHECK(s.H % 64 == 0, "the CUDA backend needs a hidden_size that is a multiple of 64, got {}: use --backend cpu "
            "for this model", s.H);
  MOE_CHECK(options.max_tokens >= 1, "max_tokens must be at least 1");
  const int64_t Tm = options.max_tokens, H = s.H, E = s.E, k = s.k;

  // Router in fp32 (DeepSeek computes it so; a bf16 gate would flip top-k choices); the Qwen2 shared
  // expert gate rides along as one more row of the same GEMM.
  const bool gated = config.shared == SharedExpertKind::sigmoid_gated;
  s.router_rows = E + (gated ? 1 : 0);
  std::vector<float> router(s.router_rows * H);
  std::copy_n(weights.router.to_f32().data_as<float>(), E * H, router.begin());
  if (gated) std::copy_n(weights.shared_gate.to_f32().data_as<float>(), H, router.begin() + E * H);
  s.router = DeviceBuffer<float>(router.size());
  s.router.upload(router.data(), router.size());
  if (!fused_router_takes(options.max_tokens, s.router_rows, H)) s.router_gemm = RouterGemm(router.data(), s.router_rows, H);
  if (weights.correction_bias.defined()) {
    s.bias = DeviceBuffer<float>(E);
    s.bias.upload(weights.correction_bias.to_f32().data_as<float>(), E);
  }
  std::vector<const SwigluWeights*> experts;
  for (const auto& w : weights.experts) experts.push_back(&w);
  upload_mlps(experts, H, s.I, s.w13, s.w2);
  if (s.S > 0) upload_mlps({&weights.shared}, H, s.S, s.shared_w13, s.shared_w2);

  // Workspace for max_tokens.
  const int64_t max_pairs = Tm * k;
  const int64_t capacity = capacity_for(options, Tm, static_cast<int>(k), static_cast<int>(E));
  s.max_rows = capacity < 0 ? max_pairs : E * capacity;
  s.permute = PermuteWorkspace(E, max_pairs, s.max_rows);
  s.logits = router_logits_buffer(Tm, s.router_rows, s.router_gemm);
  const int64_t shared_tiles = Tm + 1;
  s.ints = DeviceBuffer<int32_t>(2 + 2 * shared_tiles + 1 + Tm);
  int32_t* p = s.ints.get();
  auto carve = [&p](int64_t n) { return std::exchange(p, p + n); };
  s.shared_offsets = carve(1);
  s.shared_counts = carve(1);
  s.shared_tile_expert = carve(shared_tiles);
  s.shared_tile_row = carve(shared_tiles);
  s.shared_n_tiles = carve(1);
  s.arrivals = reinterpret_cast<unsigned*>(carve(Tm));
  MOE_CUDA_CHECK(cudaMemset(s.arrivals, 0, Tm * sizeof(unsigned)));
  s.act = DeviceBuffer<bf16>(s.max_rows * s.I);
  s.rows_out = DeviceBuffer<bf16>(s.max_rows * H);
  // The wgmma kernel reads A through a tensor map, which cannot gather: it needs the rows gathered first.
  // Rows per expert grow with T, so the largest batch decides whether any forward takes that path by the
  // policy; the tuned table may take it at any batch size.
  const double max_rows_per_expert = capacity < 0 ? double(max_pairs) / E : double(capacity);
  if (grouped_gemm_kernel_for(grouped_gemm_tile_rows(max_rows_per_expert)) == GroupedGemmKernel::wgmma ||
      (capacity < 0 && tuned_tiles_use_wgmma(E, s.I, H, Tm)))
    s.gathered = DeviceBuffer<bf16>(s.max_rows * H);
  if (wgmma_grouped_gemm_available()) {
    s.wgmma_scheduler = DeviceBuffer<int32_t>(wgmma_scheduler_ints());
    MOE_CUDA_CHECK(cudaMemset(s.wgmma_scheduler.get(), 0, s.wgmma_scheduler.size() * sizeof(int32_t)));
  }
  if (s.S > 0) {
    s.shared_act = DeviceBuffer<bf16>(Tm * s.S);
    s.shared_out = DeviceBuffer<bf16>(Tm * H);
  }
  if (options.paradigm == Paradigm::contiguous)
    s.decode_limit = std::min(Tm, decode_token_limit(config.router, H, s.router_rows));
  if (s.decode_limit > 0) {
    s.decode.act_stride = decode_act_stride(config.router, s.I, s.S, s.decode_limit);
    s.decode_logits = DeviceBuffer<float>(decode_logit_parts(s.router_rows, s.decode_limit));
    s.decode_act = DeviceBuffer<bf16>(s.decode_limit * s.decode.act_stride);
    s.decode_barrier = DeviceBuffer<unsigned>(2);
    MOE_CUDA_CHECK(cudaMemset(s.decode_barrier.get(), 0, 2 * sizeof(unsigned)));
    s.decode = {.logit_parts = s.decode_logits.get(), .act = s.decode_act.get(), .act_stride = s.decode.act_stride,
                .barrier = s.decode_barrier.get(), .expert_counts = s.permute.buffers().expert_counts,
                .dropped = s.permute.buffers().dropped};
  }

  MOE_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaMoeLayer::~CudaMoeLayer() = default;

const MoeConfig& CudaMoeLayer::config() const { return state_->config; }

int64_t CudaMoeLayer::weight_bytes() const {
  const State& s = *state_;
  return static_cast<int64_t>((s.w13.size() + s.w2.size() + s.shared_w13.size() + s.shared_w2.size()) * sizeof(bf16));
}

void CudaMoeLayer::forward(const bf16* x, int64_t T, float* out, int32_t* topk_ids, float* topk_weights,
                           cudaStream_t stream) {
  State& s = *state_;
  MOE_CHECK(T >= 0 && T <= s.options.max_tokens, "{} tokens exceed the workspace of {} (max_tokens)", T,
            s.options.max_tokens);
  if (T == 0) return;
  const int E = static_cast<int>(s.E), k = static_cast<int>(s.k);

  const RoutedPath path = s.path(T);

  // Decode batches: the whole layer in one fused launch.
  if (path.decode) {
    const DecodeWeights weights{.gate = s.router.get(), .gate_rows = s.router_rows, .correction_bias = s.bias.get(),
                                .w13 = s.w13.get(), .w2 = s.w2.get(), .intermediate = s.I,
                                .shared_w13 = s.shared_w13.get(), .shared_w2 = s.shared_w2.get(),
                                .shared_intermediate = s.S,
                                .shared_gated = s.config.shared == SharedExpertKind::sigmoid_gated};
    decode_layer(s.config.router, weights, s.H, x, T, s.decode, out, topk_ids, topk_weights, stream);
    s.last_capacity = -1;
    return;
  }

  // Router: logits = x · Wᵀ in fp32, then scores and top-k. Small batches take one fused launch; larger
  // ones RouterGemm (the gate stays fp32: a bf16 gate would flip top-k choices).
  int64_t logits_stride = s.router_rows;  // RouterGemm: its parts side by side, summed into the first
  if (fused_router_takes(T, s.router_rows, s.H)) {
    router_fused(s.config.router, x, s.H, s.router.get(), s.router_rows, s.bias.get(), T, s.logits.get(),
                 s.arrivals, topk_ids, topk_weights, stream);
  } else {
    logits_stride = s.router_rows * s.router_gemm.terms();
    s.router_gemm.run(x, T, s.logits.get(), stream);
    router_topk(s.config.router, s.logits.get(), logits_stride, s.router_gemm.terms(), s.bias.get(), T, topk_ids,
                topk_weights, stream);
  }

  // Permute into expert segments, with the tile map of the grouped GEMMs.
  const int64_t capacity = path.capacity, rows = path.rows;
  const int tile_rows = path.tile_rows;
  const bool wgmma = path.wgmma;
  const RoutedGemmPlan& plan = path.plan;
  s.last_capacity = capacity;
  const TileMap tiles =
      s.permute.tile_map(tile_rows, rows, wgmma ? wgmma_tall_rows() : 0, wgmma && wgmma_even_tiles(rows, E));
  const PermuteBuffers& pb = s.permute.buffers();
  permute(topk_ids, topk_weights, T, k, E, capacity, s.options.overflow == OverflowPolicy::renormalize, pb, tiles,
          stream);

  // Experts: gate+up with SwiGLU (tokens gathered in the loads), then down.
  GroupedGemmArgs up{.a = x, .gather = pb.row_token, .b = s.w13.get(), .c = s.act.get(),
                     .segment_offsets = pb.expert_offsets, .segment_counts = pb.segment_counts,
                     .tile_expert = tiles.tile_expert, .tile_row = tiles.tile_row, .n_tiles = tiles.n_tiles,
                     .max_tiles = tiles.max_tiles, .k = s.H, .n = s.I, .scheduler = s.wgmma_scheduler.get(),
                     .tall_rows = tiles.tall_rows};
  // Measured in the weight-stream tiles only (bench/RESULTS.md, 7th session, round 3; the 48-row tiles of
  // MOE_TILE_ROWS=48, 16th session: 1.5-2.6 us at 32 rows an expert on all four bench shapes).
  up.early_dependent_launch = tile_rows <= 48;
  up.staged_epilogue = plan.staged_gate_up;
  if (wgmma) {
    // Contiguous: every row is a pair's, so the copy can go in token order (x from DRAM about once); the
    // padded layout's unused rows must be zeroed, which the copy in row order does.
    if (capacity < 0) {
      gather_pair_rows(x, pb.pair_rows, T, k, s.H, s.gathered.get(), stream);
    } else {
      gather_rows(x, pb.row_token, rows, s.H, s.gathered.get(), stream);
    }
    up.a = s.gathered.get();
    up.gather = nullptr;
    up.n_experts = E;
    up.a_rows = rows;
    wgmma_grouped_gemm_swiglu(up, stream);
  } else {
    grouped_gemm_swiglu(up, tile_rows, stream);
  }
  GroupedGemmArgs down = up;
  down.a = s.act.get();
  down.gather = nullptr;
  down.b = s.w2.get();
  down.c = s.rows_out.get();
  down.k = s.I;
  down.n = s.H;
  down.n_experts = E;
  down.a_rows = rows;
  down.tile_map_settled = true;  // the permute's, two launches back (the mma.sync kernel's prologue uses it)
  down.early_dependent_launch = false;  // unpermute or the shared GEMMs read its output
  down.staged_epilogue = plan.staged_down;
  if (wgmma) {
    wgmma_grouped_gemm(down, stream);
  } else {
    grouped_gemm(down, tile_rows, stream);
  }

  // Shared experts: the same kernels on one dense segment of all T tokens.
  if (s.S > 0) {
    int shared_rows = grouped_gemm_tile_rows(double(T));
    // The shared MLP's rows are contiguous already, so the wgmma kernel needs no gather there.
    const bool shared_wgmma = grouped_gemm_kernel_for(shared_rows) == GroupedGemmKernel::wgmma;
    if (shared_wgmma) shared_rows = 128;
    const int shared_tall = shared_wgmma ? wgmma_tall_rows() : 0;
    const bool shared_even = shared_wgmma && wgmma_even_tiles(T, 1);
    const int64_t shared_tiles = (T + shared_rows - 1) / shared_rows + (shared_even ? 1 : 0);
    dense_segment(s.shared_offsets, s.shared_counts, T, stream);
    build_tiles(s.shared_offsets, s.shared_counts, 1,
                TileMap{.tile_rows = shared_rows, .tile_expert = s.shared_tile_expert, .tile_row = s.shared_tile_row,
                        .n_tiles = s.shared_n_tiles, .max_tiles = shared_tiles, .tall_rows = shared_tall,
                        .even_tiles = shared_even},
                stream);
    GroupedGemmArgs sup{.a = x, .gather = nullptr, .b = s.shared_w13.get(), .c = s.shared_act.get(),
                        .segment_offsets = s.shared_offsets, .segment_counts = s.shared_counts,
                        .tile_expert = s.shared_tile_expert, .tile_row = s.shared_tile_row,
                        .n_tiles = s.shared_n_tiles, .max_tiles = shared_tiles, .k = s.H, .n = s.S,
                        .scheduler = s.wgmma_scheduler.get(), .tall_rows = shared_tall};
    sup.early_dependent_launch = shared_rows <= 48;
    GroupedGemmArgs sdown = sup;
    sdown.a = s.shared_act.get();
    sdown.b = s.shared_w2.get();
    sdown.c = s.shared_out.get();
    sdown.k = s.S;
    sdown.n = s.H;
    sdown.tile_map_settled = true;  // build_tiles', two launches back
    sdown.early_dependent_launch = false;
    if (shared_wgmma) {
      sup.n_experts = sdown.n_experts = 1;
      sup.a_rows = sdown.a_rows = T;
      wgmma_grouped_gemm_swiglu(sup, stream);
      wgmma_grouped_gemm(sdown, stream);
    } else {
      grouped_gemm_swiglu(sup, shared_rows, stream);
      grouped_gemm(sdown, shared_rows, stream);
    }
  }

  // Combine in token order, plus the shared experts (sigmoid-gated for Qwen2-MoE).
  const bool gated = s.config.shared == SharedExpertKind::sigmoid_gated;
  unpermute(s.rows_out.get(), pb.pair_rows, pb.pair_weights, T, k, s.H,
            s.S > 0 ? s.shared_out.get() : nullptr, gated ? s.logits.get() + s.E : nullptr, logits_stride, out,
            stream);
}

std::string CudaMoeLayer::describe_path(int64_t n_tokens) const {
  const State& s = *state_;
  const RoutedPath path = s.path(n_tokens);
  if (path.decode) return "fused decode kernel";
  const char* chooser = path.plan.tuned ? "tuned table" : "policy";
  if (!path.wgmma)
    return "mma.sync grouped GEMMs, " + std::to_string(path.tile_rows) + "-row tiles (" + chooser + ")";
  const WgmmaSchedule up = wgmma_schedule_for(path.rows, s.E, true, s.H, path.plan.staged_gate_up);
  const WgmmaSchedule down = wgmma_schedule_for(path.rows, s.E, false, s.I, path.plan.staged_down);
  const auto clusters = [](const WgmmaSchedule& w) {
    return w.pairs ? "row-tile pairs" : w.column_pairs ? "column pairs" : "none";
  };
  return std::string("wgmma grouped GEMMs, staged epilogue gate/up ") + (up.staged_epilogue ? "on" : "off") +
         ", down " + (down.staged_epilogue ? "on" : "off") + "; clusters gate/up " + clusters(up) +
         ", down " + clusters(down) + " (" + chooser + ")";
}

DeviceLoadCounts CudaMoeLayer::read_counts(cudaStream_t stream) const {
  const State& s = *state_;
  std::vector<int32_t> counts(s.E), dropped(s.E);
  MOE_CUDA_CHECK(cudaMemcpyAsync(counts.data(), s.permute.buffers().expert_counts, s.E * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream));
  MOE_CUDA_CHECK(cudaMemcpyAsync(dropped.data(), s.permute.buffers().dropped, s.E * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream));
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {.tokens_per_expert = {counts.begin(), counts.end()},
          .dropped_per_expert = {dropped.begin(), dropped.end()},
          .capacity = s.last_capacity};
}

}  // namespace moe::cuda
