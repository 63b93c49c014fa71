// The local stages on one GPU (cuda_stages.h): the single-GPU launch sequence cut at the stage seams, its
// kernels, order, arguments and workspace carving unchanged:
//   router    router_fused, or RouterGemm + router_topk
//   prepare   permute (+ the tile map), then gather_pair_rows / gather_rows where the wgmma kernels run
//   experts   grouped GEMM gate+up with SwiGLU, then down (mma.sync or wgmma; fp8 mma.sync where config.quant
//             is fp8_block, each preceded by quantize_rows_fp8 of its input)
//   finalize  the shared experts' GEMMs on one dense segment, then unpermute (which adds them, gated)
//   decode    decode_layer: the whole layer in one launch, for batches up to the decode limit (fp8 experts
//             where config.quant is fp8_block)
// The stages share one CudaLayerState: the uploaded weights and every buffer, sized at construction.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cuda_host_path.h"
#include "cuda/device_buffer.h"
#include "cuda/expert_upload.h"
#include "cuda/ops.h"
#include "cuda/permute_workspace.h"
#include "cuda/router_gemm.h"
#include "cuda/grouped_gemm_plan.h"
#include "moe/layer/cuda_stages.h"

namespace moe {

namespace {

using cuda::bf16;
using cuda::DeviceBuffer;

int64_t capacity_for(const CudaLayerOptions& o, int64_t n_tokens, int top_k, int n_experts) {
  return o.paradigm == Paradigm::padded ? expert_capacity(o.capacity_factor, n_tokens, top_k, n_experts) : -1;
}

cudaStream_t cuda_stream(Stream stream) {
  MOE_CHECK(stream.device() == Device::cuda, "the CUDA stages need a CUDA stream (Stream::cuda), got a host one");
  return static_cast<cudaStream_t>(stream.handle());
}

// A view of workspace memory (kept alive by the stages, which outlive the views they hand out).
template <class T>
Tensor device_view(T* data, DType dtype, std::vector<int64_t> shape) {
  return Tensor::view(const_cast<std::remove_const_t<T>*>(data), dtype, std::move(shape), nullptr, Device::cuda);
}

void check_device_tensor(const Tensor& t, DType dtype, const char* what) {
  MOE_CHECK(t.device() == Device::cuda && t.dtype() == dtype && t.is_contiguous(),
            "{} must be a contiguous {} tensor on the CUDA device, got {} on the {}", what, dtype_name(dtype),
            dtype_name(t.dtype()), t.device() == Device::cuda ? "CUDA device" : "host");
}

// What one forward of a batch runs past the router: the stages run it and describe_path names it, so the
// two cannot drift apart.
struct RoutedPath {
  bool decode = false;    // the fused decode kernel runs the whole layer; nothing below applies
  int64_t capacity = -1;  // per-expert rows in the padded paradigm, -1 in the contiguous one
  int64_t rows = 0;       // rows of the grouped GEMMs
  cuda::RoutedGemmPlan plan;  // tile height, kernel and staged epilogues asked for
  bool fp8 = false;       // the fp8 mma.sync kernels run on the fp8 experts (W8A8)
  bool wgmma = false;     // the wgmma kernels run (asked for, and the gathered buffer they read exists)
  int tile_rows = 0;      // the tile height actually run (128 for wgmma)
};

// The weights and workspace of one layer on one GPU, for batches of up to options.max_tokens.
struct CudaLayerState {
  MoeConfig config;
  CudaLayerOptions options;
  int64_t H, I, S, E, k, router_rows;
  // weights
  DeviceBuffer<float> router;  // [router_rows, H]: E expert rows (+ the Qwen2 shared expert gate row)
  DeviceBuffer<float> bias;    // [E]
  DeviceBuffer<bf16> w13, w2, shared_w13, shared_w2;
  // workspace
  cuda::RouterGemm router_gemm;  // the router of the batches fused_router_takes leaves
  DeviceBuffer<float> logits;
  cuda::PermuteWorkspace permute;
  DeviceBuffer<int32_t> ints;  // the other int32 scratch arrays, carved below
  DeviceBuffer<bf16> act, rows_out, shared_act, shared_out;
  DeviceBuffer<bf16> gathered;  // [max_rows, H] token rows in expert order, for the wgmma kernel's TMA loads
  DeviceBuffer<int32_t> wgmma_scheduler;  // the wgmma kernels' work-unit queue (all launches of this layer)
  unsigned* arrivals = nullptr;  // [max_tokens] counters of the fused router (one per 8 tokens), zero between launches
  int32_t *shared_offsets = nullptr, *shared_counts = nullptr, *shared_tile_expert = nullptr,
          *shared_tile_row = nullptr, *shared_n_tiles = nullptr;
  int64_t max_rows = 0;
  // The fused decode path (decode.cu), for batches of up to decode_limit tokens in the contiguous paradigm.
  int64_t decode_limit = 0;
  DeviceBuffer<float> decode_logits;
  DeviceBuffer<bf16> decode_act;
  DeviceBuffer<unsigned> decode_barrier;
  cuda::DecodeScratch decode{};
  // config.quant fp8_block: fp8 copies of the experts, which the fused decode path streams and the fp8
  // mma.sync grouped GEMMs read where the GPU has them and the inner sizes are whole 128-value groups
  // (fp8_gemms; the shared experts apart: fp8_shared_gemms), with their inputs quantised per row and group
  // into x_fp8 / act_fp8 / shared_act_fp8. The wgmma kernels run the bf16 experts (no fp8 variant yet).
  bool fp8 = false, fp8_gemms = false, fp8_shared_gemms = false;
  cuda::Fp8Mlps experts_fp8, shared_fp8;
  DeviceBuffer<uint8_t> x_fp8, act_fp8, shared_act_fp8;
  DeviceBuffer<float> x_scale, act_scale, shared_act_scale;
  // config.quant awq_int4: int4 copies of the experts (int4_tiles.h), which the fused decode path streams
  // (W4A16, up to kDecodeMaxTokens tokens); larger batches run the bf16 experts.
  bool int4 = false;
  cuda::Int4Mlps experts_int4, shared_int4;

  CudaLayerState(const MoeConfig& config, const MoeWeights& weights, CudaLayerOptions options);

  RoutedPath path(int64_t n_tokens) const {
    RoutedPath r;
    r.decode = n_tokens <= decode_limit;
    if (r.decode) return r;
    r.capacity = capacity_for(options, n_tokens, static_cast<int>(k), static_cast<int>(E));
    r.rows = r.capacity < 0 ? n_tokens * k : E * r.capacity;
    r.plan = cuda::routed_gemm_plan(E, k, I, H, n_tokens, r.capacity);
    // fp8: in the weight-stream tiles (up to 32 rows); past them the bf16 wgmma kernels. NOTE: at 17-48
    // rows an expert the fp8 48- and 64-row kernels (185-255 registers a thread) lost to bf16 wgmma on the
    // H200 (Mixtral T=128: 818-846 us against 734; on an H100 they won, 702-902 against 1,003).
    r.fp8 = fp8_gemms && r.plan.tile_rows <= 32;
    // The wgmma kernel reads A through a tensor map, which cannot gather: without the gathered buffer
    // (sized at construction) the mma.sync kernels run instead.
    r.wgmma = !r.fp8 && r.plan.kernel == cuda::GroupedGemmKernel::wgmma && gathered.size() > 0;
    r.tile_rows = r.wgmma ? 128 : r.plan.tile_rows;
    return r;
  }

  std::string describe_path(int64_t n_tokens) const;
};

CudaLayerState::CudaLayerState(const MoeConfig& config_in, const MoeWeights& weights, CudaLayerOptions options_in)
    : config(config_in), options(options_in) {
  H = config.hidden_size;
  // NOTE: I and S are the padded sizes the kernels run with (see upload_mlps).
  I = cuda::padded_intermediate(config.expert_intermediate_size);
  S = config.shared == SharedExpertKind::none ? 0 : cuda::padded_intermediate(config.shared_intermediate_size);
  E = config.router.n_experts;
  k = config.router.top_k;
  routing::validate(config.router);
  MOE_CHECK(H % 64 == 0, "the CUDA backend needs hidden_size % 64 == 0 (got {}); run this model on the CPU backend",
            H);
  MOE_CHECK(options.max_tokens >= 1, "max_tokens must be at least 1");
  const int64_t Tm = options.max_tokens;

  // Router in fp32 (DeepSeek computes it so; a bf16 gate would flip top-k choices); the Qwen2 shared
  // expert gate rides along as one more row of the same GEMM.
  const bool gated = config.shared == SharedExpertKind::sigmoid_gated;
  router_rows = E + (gated ? 1 : 0);
  std::vector<float> host_router(router_rows * H);
  std::copy_n(weights.router.to_f32().data_as<float>(), E * H, host_router.begin());
  if (gated) std::copy_n(weights.shared_gate.to_f32().data_as<float>(), H, host_router.begin() + E * H);
  router = DeviceBuffer<float>(host_router.size());
  router.upload(host_router.data(), host_router.size());
  if (!cuda::fused_router_takes(options.max_tokens, router_rows, H))
    router_gemm = cuda::RouterGemm(host_router.data(), router_rows, H);
  if (weights.correction_bias.defined()) {
    bias = DeviceBuffer<float>(E);
    bias.upload(weights.correction_bias.to_f32().data_as<float>(), E);
  }
  std::vector<const SwigluWeights*> experts;
  for (const auto& w : weights.experts) experts.push_back(&w);
  cuda::upload_mlps(experts, H, I, w13, w2);
  if (S > 0) cuda::upload_mlps({&weights.shared}, H, S, shared_w13, shared_w2);

  // Workspace for max_tokens.
  const int64_t max_pairs = Tm * k;
  const int64_t capacity = capacity_for(options, Tm, static_cast<int>(k), static_cast<int>(E));
  max_rows = capacity < 0 ? max_pairs : E * capacity;
  permute = cuda::PermuteWorkspace(E, max_pairs, max_rows);
  logits = cuda::router_logits_buffer(Tm, router_rows, router_gemm);
  const int64_t shared_tiles = Tm + 1;
  ints = DeviceBuffer<int32_t>(2 + 2 * shared_tiles + 1 + Tm);
  int32_t* p = ints.get();
  auto carve = [&p](int64_t n) { return std::exchange(p, p + n); };
  shared_offsets = carve(1);
  shared_counts = carve(1);
  shared_tile_expert = carve(shared_tiles);
  shared_tile_row = carve(shared_tiles);
  shared_n_tiles = carve(1);
  arrivals = reinterpret_cast<unsigned*>(carve(Tm));
  MOE_CUDA_CHECK(cudaMemset(arrivals, 0, Tm * sizeof(unsigned)));
  act = DeviceBuffer<bf16>(max_rows * I);
  rows_out = DeviceBuffer<bf16>(max_rows * H);
  // The wgmma kernel reads A through a tensor map, which cannot gather: it needs the rows gathered first.
  // Rows per expert grow with T, so the largest batch decides whether any forward takes that path by the
  // policy; the tuned table may take it at any batch size.
  const double max_rows_per_expert = capacity < 0 ? double(max_pairs) / E : double(capacity);
  if (cuda::grouped_gemm_kernel_for(cuda::grouped_gemm_tile_rows(max_rows_per_expert)) ==
          cuda::GroupedGemmKernel::wgmma ||
      (capacity < 0 && cuda::tuned_tiles_use_wgmma(E, I, H, Tm)))
    gathered = DeviceBuffer<bf16>(max_rows * H);
  if (cuda::wgmma_grouped_gemm_available()) {
    wgmma_scheduler = DeviceBuffer<int32_t>(cuda::wgmma_scheduler_ints());
    MOE_CUDA_CHECK(cudaMemset(wgmma_scheduler.get(), 0, wgmma_scheduler.size() * sizeof(int32_t)));
  }
  if (S > 0) {
    shared_act = DeviceBuffer<bf16>(Tm * S);
    shared_out = DeviceBuffer<bf16>(Tm * H);
  }
  // config.quant awq_int4 with 128-input groups: int4 copies for the fused decode path (sizes of whole groups).
  int4 = config.quant.method == quant::QuantMethod::awq_int4 && config.quant.group_size == 128 && H % 128 == 0 &&
         I % 128 == 0 && S % 128 == 0 && options.paradigm == Paradigm::contiguous;
  if (options.paradigm == Paradigm::contiguous)
    decode_limit = std::min(Tm, cuda::decode_token_limit(config.router, H, router_rows, int4));
  if (decode_limit == 0) int4 = false;
  if (int4) {
    experts_int4 = cuda::quantize_mlps_int4(w13, w2, E, H, I);
    if (S > 0) shared_int4 = cuda::quantize_mlps_int4(shared_w13, shared_w2, 1, H, S);
  }
  if (decode_limit > 0) {
    decode.act_stride = cuda::decode_act_stride(config.router, I, S, decode_limit);
    decode_logits = DeviceBuffer<float>(cuda::decode_logit_parts(router_rows, decode_limit));
    decode_act = DeviceBuffer<bf16>(decode_limit * decode.act_stride);
    decode_barrier = DeviceBuffer<unsigned>(2);
    MOE_CUDA_CHECK(cudaMemset(decode_barrier.get(), 0, 2 * sizeof(unsigned)));
    decode = {.logit_parts = decode_logits.get(), .act = decode_act.get(), .act_stride = decode.act_stride,
              .barrier = decode_barrier.get(), .expert_counts = permute.buffers().expert_counts,
              .dropped = permute.buffers().dropped};
  }
  fp8 = config.quant.method == quant::QuantMethod::fp8_block;
  if (fp8) {
    experts_fp8 = cuda::quantize_mlps_fp8(w13, w2, E, H, I);
    if (S > 0) shared_fp8 = cuda::quantize_mlps_fp8(shared_w13, shared_w2, 1, H, S);
    const bool gemms = cuda::fp8_grouped_gemm_available() && H % 128 == 0;
    fp8_gemms = gemms && I % 128 == 0;
    fp8_shared_gemms = gemms && S > 0 && S % 128 == 0;
    if (fp8_gemms || fp8_shared_gemms) {
      x_fp8 = DeviceBuffer<uint8_t>(Tm * H);
      x_scale = DeviceBuffer<float>(Tm * H / 128);
    }
    if (fp8_gemms) {
      act_fp8 = DeviceBuffer<uint8_t>(max_rows * I);
      act_scale = DeviceBuffer<float>(max_rows * I / 128);
    }
    if (fp8_shared_gemms) {
      shared_act_fp8 = DeviceBuffer<uint8_t>(Tm * S);
      shared_act_scale = DeviceBuffer<float>(Tm * S / 128);
    }
  }

  MOE_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string CudaLayerState::describe_path(int64_t n_tokens) const {
  const RoutedPath p = path(n_tokens);
  if (p.decode)
    return fp8 ? "fused decode kernel, fp8 experts" : int4 ? "fused decode kernel, int4 experts" : "fused decode kernel";
  const std::string chooser = std::string(p.plan.tuned ? "tuned table" : "policy") +
                              (p.fp8 ? ", fp8 experts" : fp8 || int4 ? ", bf16 experts" : "");
  if (!p.wgmma) return "mma.sync grouped GEMMs, " + std::to_string(p.tile_rows) + "-row tiles (" + chooser + ")";
  const cuda::WgmmaSchedule up = cuda::wgmma_schedule_for(p.rows, E, true, H, p.plan.staged_gate_up);
  const cuda::WgmmaSchedule down = cuda::wgmma_schedule_for(p.rows, E, false, I, p.plan.staged_down);
  const auto clusters = [](const cuda::WgmmaSchedule& w) {
    return w.pairs ? "row-tile pairs" : w.column_pairs ? "column pairs" : "none";
  };
  return std::string("wgmma grouped GEMMs, staged epilogue gate/up ") + (up.staged_epilogue ? "on" : "off") +
         ", down " + (down.staged_epilogue ? "on" : "off") + "; clusters gate/up " + clusters(up) + ", down " +
         clusters(down) + " (" + chooser + ")";
}

using StatePtr = std::shared_ptr<CudaLayerState>;

// Makes g an fp8 GEMM: its input (rows x cols bf16) quantised into q / q_scale, its weights w / w_scale.
void use_fp8(cuda::GroupedGemmArgs& g, const bf16* input, int64_t rows, int64_t cols, DeviceBuffer<uint8_t>& q,
             DeviceBuffer<float>& q_scale, const DeviceBuffer<uint8_t>& w, const DeviceBuffer<float>& w_scale,
             cudaStream_t stream) {
  cuda::quantize_rows_fp8(input, rows, cols, q.get(), q_scale.get(), stream);
  g.a_fp8 = q.get();
  g.a_scale = q_scale.get();
  g.b_fp8 = w.get();
  g.b_scale = w_scale.get();
}

// The shared experts run in fp8 for batches of up to this many tokens (32-row tiles); larger ones go to
// the bf16 wgmma kernel, as the routed experts do.
constexpr int64_t kFp8SharedMaxTokens = 128;

// Router: logits = x · Wᵀ in fp32, then scores and top-k. Small batches take one fused launch; larger ones
// RouterGemm (the gate stays fp32: a bf16 gate would flip top-k choices).
class CudaRouter final : public Router {
 public:
  explicit CudaRouter(StatePtr state) : s_(std::move(state)) {}

  void route(const Tensor& x, RouterOutput& out, Stream stream) override {
    CudaLayerState& s = *s_;
    check_device_tensor(x, DType::BF16, "the CUDA layer's input x");
    const cudaStream_t st = cuda_stream(stream);
    const int64_t T = x.size(0);
    const auto* xp = static_cast<const bf16*>(x.data());
    int32_t* ids = out.topk.ids.data_as<int32_t>();
    float* weights = out.topk.weights.data_as<float>();
    int64_t logits_stride = s.router_rows;  // RouterGemm: its parts side by side, summed into the first
    if (cuda::fused_router_takes(T, s.router_rows, s.H)) {
      cuda::router_fused(s.config.router, xp, s.H, s.router.get(), s.router_rows, s.bias.get(), T, s.logits.get(),
                         s.arrivals, ids, weights, st);
    } else {
      logits_stride = s.router_rows * s.router_gemm.terms();
      s.router_gemm.run(xp, T, s.logits.get(), st);
      cuda::router_topk(s.config.router, s.logits.get(), logits_stride, s.router_gemm.terms(), s.bias.get(), T, ids,
                        weights, st);
    }
    out.logits = device_view(s.logits.get(), DType::F32, {T, logits_stride});  // [T, logits_stride]
  }

 private:
  StatePtr s_;
};

// Permute into expert segments, with the tile map of the grouped GEMMs; the wgmma kernels' rows gathered.
class CudaPrepare final : public Prepare {
 public:
  explicit CudaPrepare(StatePtr state) : s_(std::move(state)) {}

  ExpertBatch prepare(const Tensor& x, const TopK& topk, Stream stream) override {
    CudaLayerState& s = *s_;
    const cudaStream_t st = cuda_stream(stream);
    const int64_t T = x.size(0), H = s.H;
    const int E = static_cast<int>(s.E), k = static_cast<int>(s.k);
    const RoutedPath path = s.path(T);
    const int64_t capacity = path.capacity, rows = path.rows;
    const bool wgmma = path.wgmma;
    const cuda::TileMap tiles = s.permute.tile_map(path.tile_rows, rows, wgmma ? cuda::wgmma_tall_rows() : 0,
                                                   wgmma && cuda::wgmma_even_tiles(rows, E));
    const cuda::PermuteBuffers& pb = s.permute.buffers();
    const auto* xp = static_cast<const bf16*>(x.data());
    cuda::permute(topk.ids.data_as<int32_t>(), topk.weights.data_as<float>(), T, k, E, capacity,
                  s.options.overflow == OverflowPolicy::renormalize, pb, tiles, st);

    ExpertBatch b;
    if (wgmma) {
      // Contiguous: every row is a pair's, so the copy can go in token order (x from DRAM about once); the
      // padded layout's unused rows must be zeroed, which the copy in row order does.
      if (capacity < 0) {
        cuda::gather_pair_rows(xp, pb.pair_rows, T, k, H, s.gathered.get(), st);
      } else {
        cuda::gather_rows(xp, pb.row_token, rows, H, s.gathered.get(), st);
      }
      b.rows = device_view(s.gathered.get(), DType::BF16, {rows, H});  // [rows, H]
    } else {
      b.rows = device_view(s.gathered.get(), DType::BF16, {rows, 0});  // index-only: gathered from source
    }
    b.row_token = device_view(pb.row_token, DType::I32, {rows});
    b.expert_offsets = device_view(pb.expert_offsets, DType::I32, {E});
    b.expert_counts = device_view(pb.segment_counts, DType::I32, {E});
    b.pair_rows = device_view(pb.pair_rows, DType::I32, {T, k});
    b.pair_weights = device_view(pb.pair_weights, DType::F32, {T, k});
    b.dropped_per_expert = device_view(pb.dropped, DType::I32, {E});
    b.routed_counts = device_view(pb.expert_counts, DType::I32, {E});
    b.capacity = capacity;
    b.source = x;
    b.tile_expert = device_view(tiles.tile_expert, DType::I32, {tiles.max_tiles});
    b.tile_row = device_view(tiles.tile_row, DType::I32, {tiles.max_tiles});
    b.n_tiles = device_view(tiles.n_tiles, DType::I32, {1});
    b.tile_rows = tiles.tile_rows;
    b.tall_rows = tiles.tall_rows;
    b.even_tiles = tiles.even_tiles;
    return b;
  }

 private:
  StatePtr s_;
};

// Experts: gate+up with SwiGLU (tokens gathered in the loads, or read from the gathered rows), then down.
class CudaExperts final : public Experts {
 public:
  explicit CudaExperts(StatePtr state) : s_(std::move(state)) {}

  Tensor run(const ExpertBatch& batch, Stream stream) override {
    CudaLayerState& s = *s_;
    const cudaStream_t st = cuda_stream(stream);
    const int64_t T = batch.pair_rows.size(0), rows = batch.row_token.size(0);
    const int E = static_cast<int>(s.E);
    const RoutedPath path = s.path(T);
    const bool wgmma = batch.rows.size(1) > 0;  // the prepare gathered the rows for the wgmma kernels
    const int tile_rows = batch.tile_rows;
    cuda::GroupedGemmArgs up{.a = static_cast<const bf16*>(batch.source.data()),
                             .gather = batch.row_token.data_as<int32_t>(),
                             .b = s.w13.get(),
                             .c = s.act.get(),
                             .segment_offsets = batch.expert_offsets.data_as<int32_t>(),
                             .segment_counts = batch.expert_counts.data_as<int32_t>(),
                             .tile_expert = batch.tile_expert.data_as<int32_t>(),
                             .tile_row = batch.tile_row.data_as<int32_t>(),
                             .n_tiles = batch.n_tiles.data_as<int32_t>(),
                             .max_tiles = batch.tile_expert.size(0),
                             .k = s.H,
                             .n = s.I,
                             .scheduler = s.wgmma_scheduler.get(),
                             .tall_rows = batch.tall_rows};
    // Early dependent launch was measured in the weight-stream tiles only (up to 48 rows), where it pays:
    // on an H200, 1.5-2.6 us at 32 rows an expert with 48-row tiles, on all four bench shapes. Not in fp8,
    // where the next kernel is the quantiser of act.
    up.early_dependent_launch = tile_rows <= 48 && !path.fp8;
    up.staged_epilogue = path.plan.staged_gate_up;
    if (path.fp8) {
      use_fp8(up, up.a, batch.source.size(0), s.H, s.x_fp8, s.x_scale, s.experts_fp8.w13, s.experts_fp8.w13_scale,
              st);
      cuda::grouped_gemm_swiglu(up, tile_rows, st);
    } else if (wgmma) {
      up.a = static_cast<const bf16*>(batch.rows.data());
      up.gather = nullptr;
      up.n_experts = E;
      up.a_rows = rows;
      cuda::wgmma_grouped_gemm_swiglu(up, st);
    } else {
      cuda::grouped_gemm_swiglu(up, tile_rows, st);
    }
    cuda::GroupedGemmArgs down = up;
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
    down.staged_epilogue = path.plan.staged_down;
    if (path.fp8) {
      use_fp8(down, s.act.get(), rows, s.I, s.act_fp8, s.act_scale, s.experts_fp8.w2, s.experts_fp8.w2_scale,
              st);
      cuda::grouped_gemm(down, tile_rows, st);
    } else if (wgmma) {
      cuda::wgmma_grouped_gemm(down, st);
    } else {
      cuda::grouped_gemm(down, tile_rows, st);
    }
    return device_view(s.rows_out.get(), DType::BF16, {rows, s.H});  // [rows, H]
  }

 private:
  StatePtr s_;
};

// The shared experts (the same kernels on one dense segment of all T tokens), then the combine in token
// order, which adds them (sigmoid-gated for Qwen2-MoE): the shared experts stage fused into the finalize.
class CudaFinalize final : public Finalize {
 public:
  explicit CudaFinalize(StatePtr state) : s_(std::move(state)) {}

  void finalize(const Tensor& x, const RouterOutput& routed, const Tensor& expert_out, const ExpertBatch& batch,
                Tensor& out, Stream stream) override {
    CudaLayerState& s = *s_;
    const cudaStream_t st = cuda_stream(stream);
    check_device_tensor(out, DType::F32, "the CUDA layer's output");
    const int64_t T = x.size(0);
    const int k = static_cast<int>(s.k);
    const auto* xp = static_cast<const bf16*>(x.data());
    if (s.S > 0) {
      int shared_rows = cuda::grouped_gemm_tile_rows(double(T));
      // fp8 in the weight-stream regime, as the routed experts (at most 32-row tiles).
      const bool shared_fp8 = s.fp8_shared_gemms && T <= kFp8SharedMaxTokens;
      if (shared_fp8) shared_rows = std::min(shared_rows, 32);
      // The shared MLP's rows are contiguous already, so the wgmma kernel needs no gather there.
      const bool shared_wgmma =
          !shared_fp8 && cuda::grouped_gemm_kernel_for(shared_rows) == cuda::GroupedGemmKernel::wgmma;
      if (shared_wgmma) shared_rows = 128;
      const int shared_tall = shared_wgmma ? cuda::wgmma_tall_rows() : 0;
      const bool shared_even = shared_wgmma && cuda::wgmma_even_tiles(T, 1);
      const int64_t shared_tiles = (T + shared_rows - 1) / shared_rows + (shared_even ? 1 : 0);
      cuda::dense_segment(s.shared_offsets, s.shared_counts, T, st);
      cuda::build_tiles(s.shared_offsets, s.shared_counts, 1,
                        cuda::TileMap{.tile_rows = shared_rows, .tile_expert = s.shared_tile_expert,
                                      .tile_row = s.shared_tile_row, .n_tiles = s.shared_n_tiles,
                                      .max_tiles = shared_tiles, .tall_rows = shared_tall, .even_tiles = shared_even},
                        st);
      cuda::GroupedGemmArgs sup{.a = xp, .gather = nullptr, .b = s.shared_w13.get(), .c = s.shared_act.get(),
                                .segment_offsets = s.shared_offsets, .segment_counts = s.shared_counts,
                                .tile_expert = s.shared_tile_expert, .tile_row = s.shared_tile_row,
                                .n_tiles = s.shared_n_tiles, .max_tiles = shared_tiles, .k = s.H, .n = s.S,
                                .scheduler = s.wgmma_scheduler.get(), .tall_rows = shared_tall};
      sup.early_dependent_launch = shared_rows <= 48;
      cuda::GroupedGemmArgs sdown = sup;
      sdown.a = s.shared_act.get();
      sdown.b = s.shared_w2.get();
      sdown.c = s.shared_out.get();
      sdown.k = s.S;
      sdown.n = s.H;
      sdown.tile_map_settled = true;  // build_tiles', two launches back
      sdown.early_dependent_launch = false;
      if (shared_fp8) {
        sup.early_dependent_launch = false;  // the quantiser of shared_act follows
        use_fp8(sup, xp, T, s.H, s.x_fp8, s.x_scale, s.shared_fp8.w13, s.shared_fp8.w13_scale, st);
        cuda::grouped_gemm_swiglu(sup, shared_rows, st);
        use_fp8(sdown, s.shared_act.get(), T, s.S, s.shared_act_fp8, s.shared_act_scale, s.shared_fp8.w2,
                s.shared_fp8.w2_scale, st);
        cuda::grouped_gemm(sdown, shared_rows, st);
      } else if (shared_wgmma) {
        sup.n_experts = sdown.n_experts = 1;
        sup.a_rows = sdown.a_rows = T;
        cuda::wgmma_grouped_gemm_swiglu(sup, st);
        cuda::wgmma_grouped_gemm(sdown, st);
      } else {
        cuda::grouped_gemm_swiglu(sup, shared_rows, st);
        cuda::grouped_gemm(sdown, shared_rows, st);
      }
    }
    const bool gated = s.config.shared == SharedExpertKind::sigmoid_gated;
    MOE_CHECK(!gated || routed.logits.defined(), "the gated shared expert reads the router's logits (column E)");
    const int64_t logits_stride = routed.logits.defined() ? routed.logits.size(1) : s.router_rows;
    cuda::unpermute(static_cast<const bf16*>(expert_out.data()), batch.pair_rows.data_as<int32_t>(),
                    batch.pair_weights.data_as<float>(), T, k, s.H, s.S > 0 ? s.shared_out.get() : nullptr,
                    gated ? routed.logits.data_as<float>() + s.E : nullptr, logits_stride, out.data_as<float>(), st);
  }

 private:
  StatePtr s_;
};

// Decode batches: the whole layer in one fused launch.
class CudaDecode final : public FusedLayer {
 public:
  explicit CudaDecode(StatePtr state) : s_(std::move(state)) {
    const cuda::PermuteBuffers& pb = s_->permute.buffers();
    counters_.routed_counts = device_view(pb.expert_counts, DType::I32, {s_->E});
    counters_.dropped_per_expert = device_view(pb.dropped, DType::I32, {s_->E});
  }

  int64_t max_tokens() const override { return s_->decode_limit; }

  ExpertBatch forward(const Tensor& x, const TopK& topk, Tensor& out, Stream stream) override {
    CudaLayerState& s = *s_;
    check_device_tensor(x, DType::BF16, "the CUDA layer's input x");
    check_device_tensor(out, DType::F32, "the CUDA layer's output");
    const cuda::DecodeWeights weights{.gate = s.router.get(), .gate_rows = s.router_rows,
                                      .correction_bias = s.bias.get(), .w13 = s.w13.get(), .w2 = s.w2.get(),
                                      .intermediate = s.I, .shared_w13 = s.shared_w13.get(),
                                      .shared_w2 = s.shared_w2.get(), .shared_intermediate = s.S,
                                      .shared_gated = s.config.shared == SharedExpertKind::sigmoid_gated,
                                      .w13_fp8 = s.experts_fp8.w13.get(), .w13_scale = s.experts_fp8.w13_scale.get(),
                                      .w2_fp8 = s.experts_fp8.w2.get(), .w2_scale = s.experts_fp8.w2_scale.get(),
                                      .shared_w13_fp8 = s.shared_fp8.w13.get(),
                                      .shared_w13_scale = s.shared_fp8.w13_scale.get(),
                                      .shared_w2_fp8 = s.shared_fp8.w2.get(),
                                      .shared_w2_scale = s.shared_fp8.w2_scale.get(),
                                      .w13_int4 = s.experts_int4.w13.get(),
                                      .w13_scale_zero = s.experts_int4.w13_scale_zero.get(),
                                      .w2_int4 = s.experts_int4.w2.get(),
                                      .w2_scale_zero = s.experts_int4.w2_scale_zero.get(),
                                      .shared_w13_int4 = s.shared_int4.w13.get(),
                                      .shared_w13_scale_zero = s.shared_int4.w13_scale_zero.get(),
                                      .shared_w2_int4 = s.shared_int4.w2.get(),
                                      .shared_w2_scale_zero = s.shared_int4.w2_scale_zero.get()};
    cuda::decode_layer(s.config.router, weights, s.H, static_cast<const bf16*>(x.data()), x.size(0), s.decode,
                       out.data_as<float>(), topk.ids.data_as<int32_t>(), topk.weights.data_as<float>(),
                       cuda_stream(stream));
    return counters_;
  }

 private:
  StatePtr s_;
  ExpertBatch counters_;  // routed_counts and dropped_per_expert: the permute's counters, which decode writes
};

}  // namespace

LayerStages make_cuda_stages(const MoeConfig& config, const MoeWeights& weights, CudaLayerOptions options) {
  auto state = std::make_shared<CudaLayerState>(config, weights, options);
  LayerStages stages;
  stages.device = Device::cuda;
  stages.router = std::make_unique<CudaRouter>(state);
  stages.prepare = std::make_unique<CudaPrepare>(state);
  stages.experts = std::make_unique<CudaExperts>(state);
  stages.finalize = std::make_unique<CudaFinalize>(state);
  if (state->decode_limit > 0) stages.small_batch = std::make_unique<CudaDecode>(state);
  stages.counts_to_host = [](const Tensor& counts, Stream stream) {
    MOE_CHECK(counts.dtype() == DType::I32, "device counters are I32, got {}", dtype_name(counts.dtype()));
    std::vector<int32_t> host(counts.numel());
    MOE_CUDA_CHECK(cudaMemcpyAsync(host.data(), counts.data(), counts.nbytes(), cudaMemcpyDeviceToHost,
                                   cuda_stream(stream)));
    MOE_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(stream)));
    return std::vector<int64_t>(host.begin(), host.end());
  };
  stages.describe_path = [state](int64_t n_tokens) { return state->describe_path(n_tokens); };
  stages.weight_bytes = static_cast<int64_t>(
      (state->w13.size() + state->w2.size() + state->shared_w13.size() + state->shared_w2.size()) * sizeof(bf16) +
      state->experts_fp8.bytes() + state->shared_fp8.bytes() + state->experts_int4.bytes() +
      state->shared_int4.bytes());
  stages.max_tokens = options.max_tokens;
  stages.host_forward = make_cuda_host_path(config, options.max_tokens);
  return stages;
}

}  // namespace moe
