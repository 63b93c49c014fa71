// DecoderOps on the GPU: each op calls its CUDA op (cuda/decoder_kernels.h, linear.h) on device tensors,
// all on the ops' own stream, which the CUDA MoE blocks use too (stream()). Activations are bf16, the
// residual stream, the KV pool and the logits fp32. The weights go to the device at load (load_weight: bf16,
// norm weights and biases fp32). A forward's tables (ids, positions, cache slots, block tables, choices) go
// up once, at begin_step (cuda_step_tables.h); the rotary frequencies when they change. record() captures
// what the ops enqueue as a CUDA graph.
// NOTE: here and not in model/ or cuda/: model/ may not see cuda/, and cuda/ holds ops only.
#include "cuda_decoder_ops.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/captured_graph.h"
#include "cuda/check.h"
#include "cuda/decoder_kernels.h"
#include "cuda/device_tensor.h"
#include "cuda/linear.h"
#include "cuda/ops.h"
#include "engine/cuda_model.h"
#include "engine/cuda_step_tables.h"
#include "moe/layer/cuda_stages.h"

namespace moe::engine {

namespace {

using cuda::bf16;
using model::AttentionShape;
using model::BatchLayout;
using model::MlaShape;
using model::ModelKvCache;

bf16* bf16_data(const Tensor& t) {
  return static_cast<bf16*>(t.data());
}

// A device tensor for the ops: on the device, of `dtype`, contiguous rows (a strided row view allowed where
// `strided_rows`).
void require_device(const Tensor& t, DType dtype, const char* op, bool strided_rows = false) {
  MOE_CHECK(t.defined() && t.device() == Device::cuda && t.dtype() == dtype && t.dim() == 2 &&
                (strided_rows ? t.strides()[1] == 1 : t.is_contiguous()),
            "{}: expects a {} 2-D device tensor, got {} {} on the {}", op, dtype_name(dtype),
            dtype_name(t.dtype()), t.shape_string(), t.device() == Device::cuda ? "device" : "host");
}

cuda::RopePairing device_pairing(cpu::RopePairing pairing) {
  return pairing == cpu::RopePairing::halves  ? cuda::RopePairing::halves
         : pairing == cpu::RopePairing::pairs ? cuda::RopePairing::pairs
                                              : cuda::RopePairing::pairs_to_halves;
}

// The last contents uploaded to one device table, re-sent only when they change.
template <class T, DType kDType>
class DeviceTable {
 public:
  const T* upload(std::vector<T> values, cudaStream_t stream) {
    if (!device_.defined() || values != host_) {
      host_ = std::move(values);
      device_ = cuda::device_empty(kDType, {static_cast<int64_t>(host_.size())}, stream);
      // NOTE: from pageable memory the copy returns once the data is staged, so host_ may change after.
      MOE_CUDA_CHECK(cudaMemcpyAsync(device_.data(), host_.data(), host_.size() * sizeof(T),
                                     cudaMemcpyHostToDevice, stream));
    }
    return static_cast<const T*>(device_.data());
  }

 private:
  std::vector<T> host_;
  Tensor device_;
};

class Recording final : public model::RecordedStep {
 public:
  Recording(cuda::CapturedGraph graph, cudaStream_t stream) : graph_(std::move(graph)), stream_(stream) {}
  void replay() override { graph_.launch(stream_); }

 private:
  cuda::CapturedGraph graph_;
  cudaStream_t stream_;
};

class CudaDecoderOps final : public model::DecoderOps {
 public:
  // NOTE: the stream is never destroyed: tensors made on it free themselves on it and may outlive the ops
  // (a KV cache its caller holds). It is a blocking stream, so that work on the legacy default stream
  // (the loading's) stays ordered with it.
  CudaDecoderOps() { MOE_CUDA_CHECK(cudaStreamCreate(&stream_)); }

  void begin_step(const model::StepInputs& step) override { tables_.upload(step, stream_); }

  std::unique_ptr<model::RecordedStep> record(const std::function<void()>& enqueue) override {
    // NOTE: relaxed, so that host work of the ops (cuBLASLt's descriptors) may run during the capture.
    return std::make_unique<Recording>(cuda::CapturedGraph(stream_, enqueue, cudaStreamCaptureModeRelaxed), stream_);
  }

  Stream stream() const override { return Stream::cuda(stream_); }

  Tensor empty(DType dtype, std::vector<int64_t> shape) override {
    return cuda::device_empty(dtype, std::move(shape), stream_);
  }

  Tensor embedding(const Tensor& table, std::span<const int32_t> ids) override {
    const int64_t V = table.size(0), H = table.size(1);
    for (size_t i = 0; i < ids.size(); ++i)
      MOE_CHECK(ids[i] >= 0 && ids[i] < V,
                "token id {} (position {} of the batch) is outside the vocabulary [0, {})", ids[i], i, V);
    const Tensor& w = weight(table, DType::BF16);
    const int32_t* d_ids = step_rows(static_cast<int64_t>(ids.size()), "embedding").ids;
    Tensor out = cuda::device_empty(DType::F32, {static_cast<int64_t>(ids.size()), H}, stream_);  // [n, H]
    cuda::embedding(bf16_data(w), H, d_ids, static_cast<int64_t>(ids.size()), out.data_as<float>(), stream_);
    return out;
  }

  Tensor add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& norm, double eps) override {
    require_device(residual, DType::F32, "add_rms_norm");
    const int64_t T = residual.size(0), H = residual.size(1);
    const bf16* delta_bf16 = nullptr;
    const float* delta_f32 = nullptr;
    if (delta.defined()) {
      require_device(delta, delta.dtype() == DType::F32 ? DType::F32 : DType::BF16, "add_rms_norm");
      MOE_CHECK(delta.shape() == residual.shape(), "add_rms_norm: delta {} is not residual's {}",
                delta.shape_string(), residual.shape_string());
      if (delta.dtype() == DType::F32)
        delta_f32 = delta.data_as<float>();
      else
        delta_bf16 = bf16_data(delta);
    }
    Tensor out = cuda::device_empty(DType::BF16, {T, H}, stream_);  // [T, H]
    cuda::add_rms_norm(residual.data_as<float>(), delta_bf16, delta_f32,
                       weight(norm, DType::F32).data_as<float>(), T, H, static_cast<float>(eps),
                       bf16_data(out), stream_);
    return out;
  }

  void rms_norm(Tensor& x, const Tensor& norm, double eps, int64_t width) override {
    require_device(x, DType::BF16, "rms_norm", true);
    MOE_CHECK(width > 0 && x.size(1) % width == 0, "rms_norm: width {} does not divide rows {}", width,
              x.shape_string());
    cuda::rms_norm(bf16_data(x), x.size(0), x.strides()[0], x.size(1) / width, width,
                   weight(norm, DType::F32).data_as<float>(), static_cast<float>(eps), stream_);
  }

  void rms_norm_prefix(Tensor& x, const Tensor& norm, double eps, int64_t width) override {
    require_device(x, DType::BF16, "rms_norm_prefix");
    MOE_CHECK(width > 0 && width <= x.size(1), "rms_norm_prefix: width {} exceeds rows {}", width,
              x.shape_string());
    cuda::rms_norm(bf16_data(x), x.size(0), x.size(1), 1, width, weight(norm, DType::F32).data_as<float>(),
                   static_cast<float>(eps), stream_);
  }

  Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) override {
    Tensor y = gemm(x, w, DType::BF16, "linear");  // [T, out]
    if (bias.defined())
      cuda::add_bias(bf16_data(y), y.size(0), y.size(1), weight(bias, DType::F32).data_as<float>(), stream_);
    return y;
  }

  void clamp(Tensor& x, float clip) override {
    require_device(x, DType::BF16, "clamp");
    cuda::clamp(bf16_data(x), x.numel(), clip, stream_);
  }

  void rope(const model::Rope& rope, Tensor& x, int64_t heads, int64_t offset,
            std::span<const int64_t> positions) override {
    require_device(x, DType::BF16, "rope", true);
    const cpu::RopeTable table = rope.cpu_table();
    const auto half = static_cast<int>(table.inv_freq.size());
    MOE_CHECK(heads > 0 && x.size(1) % heads == 0 && offset + 2 * half <= x.size(1) / heads &&
                  static_cast<int64_t>(positions.size()) == x.size(0),
              "rope: rows {} do not hold {} heads with {} rotary dimensions from column {} ({} positions)",
              x.shape_string(), heads, 2 * half, offset, positions.size());
    cuda::rope({.x = bf16_data(x),
                .rows = x.size(0),
                .heads = heads,
                .head_stride = x.size(1) / heads,
                .offset = offset,
                .inv_freq = inv_freq_.upload({table.inv_freq.begin(), table.inv_freq.end()}, stream_),
                .half = half,
                .attention_factor = table.attention_factor,
                .pairing = device_pairing(table.pairing),
                .positions = step_rows(static_cast<int64_t>(positions.size()), "rope").positions,
                .row_stride = x.strides()[0]},
               stream_);
  }

  void attention_inputs(Tensor& q, Tensor& k, const Tensor& v, const model::HeadNorms& norms,
                        const model::Rope& rope, const AttentionShape& shape, ModelKvCache& cache, int64_t layer,
                        const BatchLayout& batch) override {
    require_device(q, DType::BF16, "attention_inputs", true);
    require_device(k, DType::BF16, "attention_inputs", true);
    require_device(v, DType::BF16, "attention_inputs", true);
    const cpu::RopeTable table = rope.cpu_table();
    const auto half = static_cast<int64_t>(table.inv_freq.size());
    const KvBlockShape s = cache.pool().shape();
    const int64_t D = shape.dk, kv_width = shape.kv_heads * D;
    // NOTE: one pass where RoPE turns whole heads and both norms or neither are given (every GQA family);
    // otherwise the ops one by one.
    if (2 * half != D || norms.q.defined() != norms.k.defined() || s.key_row != kv_width ||
        s.value_row != kv_width) {
      DecoderOps::attention_inputs(q, k, v, norms, rope, shape, cache, layer, batch);
      return;
    }
    MOE_CHECK(q.size(1) == shape.heads * D && k.size(1) == kv_width && v.size(1) == kv_width &&
                  q.size(0) == batch.total && k.size(0) == batch.total && v.size(0) == batch.total,
              "attention_inputs: q {}, k {}, v {} are not [{}, {} x {}] and [{}, {} x {}]", q.shape_string(),
              k.shape_string(), v.shape_string(), batch.total, shape.heads, D, batch.total, shape.kv_heads, D);
    const CudaStepTables::View& step = step_rows(batch.total, "attention_inputs");
    cuda::attention_inputs(
        {.q = bf16_data(q),
         .k = bf16_data(k),
         .v = bf16_data(v),
         .q_row = q.strides()[0],
         .k_row = k.strides()[0],
         .v_row = v.strides()[0],
         .rows = batch.total,
         .heads = shape.heads,
         .kv_heads = shape.kv_heads,
         .head_dim = D,
         .q_norm = norms.q.defined() ? weight(norms.q, DType::F32).data_as<float>() : nullptr,
         .k_norm = norms.k.defined() ? weight(norms.k, DType::F32).data_as<float>() : nullptr,
         .eps = static_cast<float>(norms.eps),
         .inv_freq = inv_freq_.upload({table.inv_freq.begin(), table.inv_freq.end()}, stream_),
         .half = static_cast<int>(half),
         .attention_factor = table.attention_factor,
         .pairing = device_pairing(table.pairing),
         .positions = step.positions,
         .slots = step.slots,
         .key_pool = cache.pool().keys(layer, 0),
         .value_pool = cache.pool().values(layer, 0)},
        stream_);
  }

  void append_kv(ModelKvCache& cache, int64_t layer, const BatchLayout& batch, const Tensor& keys,
                 const Tensor& values) override {
    require_device(keys, DType::BF16, "append_kv", true);
    require_device(values, DType::BF16, "append_kv", true);
    const KvBlockShape s = cache.pool().shape();
    MOE_CHECK(keys.size(1) == s.key_row && values.size(1) == s.value_row && keys.size(0) == batch.total &&
                  values.size(0) == batch.total,
              "append_kv: keys {} and values {} are not [{}, {}] and [{}, {}]", keys.shape_string(),
              values.shape_string(), batch.total, s.key_row, batch.total, s.value_row);
    const int32_t* d_slots = step_rows(batch.total, "append_kv").slots;
    cuda::append_kv(bf16_data(keys), batch.total, s.key_row, keys.strides()[0], d_slots,
                    cache.pool().keys(layer, 0), stream_);
    cuda::append_kv(bf16_data(values), batch.total, s.value_row, values.strides()[0], d_slots,
                    cache.pool().values(layer, 0), stream_);
  }

  Tensor attention(const Tensor& q, const ModelKvCache& cache, int64_t layer, const BatchLayout& batch,
                   const AttentionShape& shape) override {
    require_device(q, DType::BF16, "attention", true);
    const int64_t T = q.size(0);
    MOE_CHECK(q.size(1) == shape.heads * shape.dk && T == batch.total, "attention: q {} is not [{}, {} x {}]",
              q.shape_string(), batch.total, shape.heads, shape.dk);
    const CudaStepTables::View& step = step_rows(T, "attention");
    Tensor out = cuda::device_empty(DType::BF16, {T, shape.heads * shape.dv}, stream_);  // [T, heads * dv]
    cuda::paged_attention({.q = bf16_data(q),
                           .keys = cache.pool().keys(layer, 0),
                           .values = cache.pool().values(layer, 0),
                           .block_tables = step.block_tables,
                           .row_table = step.row_table,
                           .row_visible = step.row_visible,
                           .rows = T,
                           .heads = shape.heads,
                           .kv_heads = shape.kv_heads,
                           .dk = shape.dk,
                           .dv = shape.dv,
                           .block_tokens = cache.block_tokens(),
                           .scale = static_cast<float>(shape.scale),
                           .out = bf16_data(out),
                           .max_sequence_rows = step.max_sequence_rows,
                           .q_row = q.strides()[0]},
                          stream_);
    return out;
  }

  Tensor mla_absorb_queries(const Tensor& q, const Tensor& kv_b, const MlaShape& shape) override {
    require_device(q, DType::BF16, "mla_absorb_queries");
    const int64_t T = q.size(0);
    MOE_CHECK(q.size(1) == shape.heads * (shape.nope + shape.rope),
              "mla_absorb_queries: q {} is not [T, {} x {}]", q.shape_string(), shape.heads,
              shape.nope + shape.rope);
    Tensor out = cuda::device_empty(DType::BF16, {T, shape.heads * (shape.rank + shape.rope)}, stream_);
    cuda::mla_absorb_queries(bf16_data(q), bf16_data(weight(kv_b, DType::BF16)), dims(shape), T,
                             bf16_data(out), stream_);
    return out;  // [T, heads, rank + rope]
  }

  Tensor mla_expand_context(const Tensor& context, const Tensor& kv_b, const MlaShape& shape) override {
    require_device(context, DType::BF16, "mla_expand_context");
    const int64_t T = context.size(0);
    MOE_CHECK(context.size(1) == shape.heads * shape.rank,
              "mla_expand_context: context {} is not [T, {} x {}]", context.shape_string(), shape.heads,
              shape.rank);
    Tensor out = cuda::device_empty(DType::BF16, {T, shape.heads * shape.v}, stream_);
    cuda::mla_expand_context(bf16_data(context), bf16_data(weight(kv_b, DType::BF16)), dims(shape), T,
                             bf16_data(out), stream_);
    return out;  // [T, heads * v]
  }

  Tensor swiglu_mlp(const Tensor& x, const SwigluWeights& w) override {
    const Tensor gate = gemm(x, w.gate, DType::BF16, "swiglu_mlp"),
                 up = gemm(x, w.up, DType::BF16, "swiglu_mlp");
    Tensor act = cuda::device_empty(DType::BF16, gate.shape(), stream_);  // [T, I]
    cuda::silu_mul(bf16_data(gate), bf16_data(up), gate.numel(), bf16_data(act), stream_);
    return gemm(act, w.down, DType::BF16, "swiglu_mlp");  // [T, H]
  }

  Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows) override {
    require_device(x, DType::BF16, "gather_rows");
    for (const int64_t r : rows)
      MOE_CHECK(r >= 0 && r < x.size(0), "gather_rows: row {} outside [0, {})", r, x.size(0));
    const CudaStepTables::View& step = tables_.view();
    MOE_CHECK(step.n_last_rows == static_cast<int64_t>(rows.size()),
              "gather_rows: {} rows, the step's tables hold {} (begin_step's last_rows)", rows.size(),
              step.n_last_rows);
    Tensor out = cuda::device_empty(DType::BF16, {static_cast<int64_t>(rows.size()), x.size(1)}, stream_);
    cuda::gather_rows(bf16_data(x), step.last_rows, out.size(0), x.size(1), bf16_data(out), stream_);
    return out;  // [n, H]
  }

  Tensor lm_head(const Tensor& x, const Tensor& w) override { return gemm(x, w, DType::F32, "lm_head"); }

  // Only the ids come back (the step's one synchronisation).
  std::vector<int32_t> choose_tokens(const Tensor& logits,
                                     std::span<const model::TokenChoice> choices) override {
    const int64_t n = logits.size(0);
    Tensor ids = cuda::device_empty(DType::I32, {n}, stream_);  // [n]
    choose_tokens_into(logits, choices, ids);
    const Tensor host = staging_.to_host(ids, stream_);
    const int32_t* chosen = host.data_as<int32_t>();
    for (int64_t r = 0; r < n; ++r)
      MOE_CHECK(chosen[r] >= 0,
                "the model's logits are not finite (row {} of the step): a layer overflowed or the weights hold "
                "NaN or Inf (the CPU backend names the layer)", r);
    return {chosen, chosen + n};
  }

  void choose_tokens_into(const Tensor& logits, std::span<const model::TokenChoice> choices, Tensor& ids) override {
    require_device(logits, DType::F32, "choose_tokens");
    const int64_t n = logits.size(0);
    const CudaStepTables::View& step = tables_.view();
    MOE_CHECK(static_cast<int64_t>(choices.size()) == n && step.n_choices == n && ids.device() == Device::cuda &&
                  ids.dtype() == DType::I32 && ids.numel() == n,
              "choose_tokens: {} choices ({} in the step's tables) for logits {} into {} ids", choices.size(),
              step.n_choices, logits.shape_string(), ids.numel());
    cuda::choose_tokens(logits.data_as<float>(), n, logits.size(1), step.choices, ids.data_as<int32_t>(), stream_);
  }

  Tensor fuse_rows(std::span<const Tensor> weights) override {
    MOE_CHECK(!weights.empty(), "fuse_rows: no weights");
    std::vector<int64_t> shape = weights.front().shape();
    shape[0] = 0;
    for (const Tensor& w : weights) {
      MOE_CHECK(w.device() == Device::cuda && w.is_contiguous() && w.dtype() == weights.front().dtype() &&
                    w.dim() == weights.front().dim() &&
                    std::equal(w.shape().begin() + 1, w.shape().end(), weights.front().shape().begin() + 1),
                "fuse_rows: {} {} does not stack under {} {}", dtype_name(w.dtype()), w.shape_string(),
                dtype_name(weights.front().dtype()), weights.front().shape_string());
      shape[0] += w.size(0);
    }
    Tensor fused = cuda::device_empty(weights.front().dtype(), std::move(shape), stream_);
    size_t at = 0;
    for (const Tensor& w : weights) {
      MOE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(fused.data()) + at, w.data(), w.nbytes(),
                                     cudaMemcpyDeviceToDevice, stream_));
      at += w.nbytes();
    }
    // NOTE: the parts are released after this returns; their copies must be done by then.
    MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return fused;
  }

  // NOTE: a weight already on the device (random weights made there) is kept as it is, in the dtype it must
  // have.
  Tensor load_weight(const Tensor& view, bool fp32) override {
    const DType dtype = fp32 ? DType::F32 : DType::BF16;
    if (view.device() == Device::cuda) return weight(view, dtype);
    if (!upload_) upload_.emplace();
    return cuda::to_device(view, dtype, stream_, *upload_);
  }

  Tensor kv_blocks(std::vector<int64_t> shape) override {
    return cuda::device_empty(DType::F32, std::move(shape), stream_);
  }

  int64_t memory_available() const override {
    size_t free = 0, total = 0;
    MOE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<int64_t>(free);
  }

  Tensor to_host(const Tensor& x) override {
    return x.device() == Device::cuda ? staging_.to_host(x, stream_) : x;
  }

  std::vector<Tensor> to_host_all(std::span<const Tensor> xs) override {
    return staging_.to_host_all(xs, stream_);
  }

 private:
  using KvBlockShape = model::KvBlockPool::Shape;

  static cuda::MlaDims dims(const MlaShape& s) {
    return {.heads = s.heads, .nope = s.nope, .rope = s.rope, .v = s.v, .rank = s.rank};
  }

  // A weight of load_weight's: on the device, in `dtype`.
  static const Tensor& weight(const Tensor& w, DType dtype) {
    MOE_CHECK(
        w.defined() && w.device() == Device::cuda && w.dtype() == dtype && w.is_contiguous(),
        "a weight of the GPU's ops must come from their load_weight ({} on the device), got {} {} on the {}",
        dtype_name(dtype), dtype_name(w.dtype()), w.shape_string(),
        w.device() == Device::cuda ? "device" : "host");
    return w;
  }

  // x [T, in] bf16 on the device · w [out, in]ᵀ (load_weight's) -> [T, out] of out_dtype.
  Tensor gemm(const Tensor& x, const Tensor& w, DType out_dtype, const char* op) {
    require_device(x, DType::BF16, op);
    MOE_CHECK(w.dim() == 2 && w.size(1) == x.size(1), "{}: x {} does not match weight {}", op,
              x.shape_string(), w.shape_string());
    Tensor y = cuda::device_empty(out_dtype, {x.size(0), w.size(0)}, stream_);
    gemm_.linear(bf16_data(x), x.size(0), x.size(1), bf16_data(weight(w, DType::BF16)), w.size(0), y.data(),
                 out_dtype == DType::F32, stream_);
    return y;
  }

  // The step's tables, checked to be for `rows` rows.
  const CudaStepTables::View& step_rows(int64_t rows, const char* op) const {
    const CudaStepTables::View& step = tables_.view();
    MOE_CHECK(step.rows == rows, "{}: {} rows, the step's tables hold {} (begin_step's batch)", op, rows, step.rows);
    return step;
  }

  cudaStream_t stream_ = nullptr;  // CudaMoeBlock's too
  std::optional<cuda::PinnedUpload> upload_;  // load_weight's staging, made at the first weight
  cuda::DenseGemm gemm_;
  cuda::HostStaging staging_;  // the logits and the routing on their way back
  CudaStepTables tables_;
  DeviceTable<float, DType::F32> inv_freq_;
};

}  // namespace

std::unique_ptr<model::DecoderOps> make_cuda_decoder_ops() {
  return std::make_unique<CudaDecoderOps>();
}

namespace {

model::ModelOptions cuda_options(model::ModelOptions options) {
  MOE_CHECK(cuda_device_available(), "backend cuda: no GPU is visible (use the cpu backend)");
  MOE_CHECK(!options.moe_block,
            "the decoder on the GPU runs its own MoE blocks: it takes no moe_block function "
            "(expert parallelism runs the decoder on the host)");
  options.backend = model::ModelBackend::cuda;
  return options;
}

}  // namespace

std::unique_ptr<model::CausalLM> load_cuda_causal_lm(const std::filesystem::path& dir,
                                                     model::ModelOptions options) {
  return model::load_causal_lm(dir, cuda_options(std::move(options)), make_cuda_decoder_ops());
}

std::unique_ptr<model::CausalLM> load_cuda_causal_lm(model::ModelConfig config, Checkpoint checkpoint,
                                                     model::ModelOptions options) {
  return model::load_causal_lm(std::move(config), std::move(checkpoint), cuda_options(std::move(options)),
                               make_cuda_decoder_ops());
}

}  // namespace moe::engine
