// DecoderOps on the CPU: each op calls its src/cpu/ op (fp32, on the vectorised kernels), with the paged
// KV cache's blocks handed to the attention op as pointers.
#include <vector>

#include "decoder_ops.h"
#include "cpu/attention.h"
#include "cpu/clamp.h"
#include "cpu/embedding.h"
#include "cpu/linear.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"

namespace moe::model {

namespace {

class CpuDecoderOps final : public DecoderOps {
 public:
  Tensor embedding(const Tensor& table, std::span<const int32_t> ids) override { return cpu::embedding(table, ids); }

  Tensor add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, double eps) override {
    return cpu::add_rms_norm(residual, delta, weight, eps);
  }

  void rms_norm(Tensor& x, const Tensor& weight, double eps, int64_t width) override {
    cpu::rms_norm(x, weight, eps, width);
  }

  void rms_norm_prefix(Tensor& x, const Tensor& weight, double eps, int64_t width) override {
    cpu::rms_norm_prefix(x, weight, eps, width);
  }

  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) override {
    return cpu::linear(x, weight, bias);
  }

  void clamp(Tensor& x, float clip) override { cpu::clamp(x, clip); }

  void rope(const Rope& rope, Tensor& x, int64_t heads, int64_t offset, std::span<const int64_t> positions) override {
    cpu::rope(rope.cpu_table(), x, heads, offset, positions);
  }

  void append_kv(ModelKvCache& cache, int64_t layer, const BatchLayout& batch, const Tensor& keys,
                 const Tensor& values) override {
    for (const BatchLayout::Span& s : batch.spans) {
      if (s.pad) continue;  // a padding row writes nothing
      cpu::append_kv(keys, s.row, s.count, s.start, cache.key_blocks(layer, s.seq), cache.block_tokens());
      cpu::append_kv(values, s.row, s.count, s.start, cache.value_blocks(layer, s.seq), cache.block_tokens());
    }
  }

  Tensor attention(const Tensor& q, const ModelKvCache& cache, int64_t layer, const BatchLayout& batch,
                   const AttentionShape& shape) override {
    const size_t n = batch.spans.size();
    std::vector<std::vector<const float*>> keys(n), values(n);
    std::vector<cpu::AttentionSpan> spans(n);
    for (size_t i = 0; i < n; ++i) {
      const BatchLayout::Span& s = batch.spans[i];
      const std::vector<float*> k = cache.key_blocks(layer, s.seq), v = cache.value_blocks(layer, s.seq);
      keys[i].assign(k.begin(), k.end());
      values[i].assign(v.begin(), v.end());
      spans[i] = {.row = s.row, .count = s.count, .start = s.start, .key_blocks = keys[i], .value_blocks = values[i]};
    }
    Tensor out = Tensor::empty(DType::F32, {q.size(0), shape.heads * shape.dv});  // [T, heads * dv]
    cpu::attention(q, spans,
                   {.heads = shape.heads, .kv_heads = shape.kv_heads, .dk = shape.dk, .dv = shape.dv,
                    .block_tokens = cache.block_tokens(), .scale = shape.scale},
                   out);
    return out;
  }

  Tensor mla_absorb_queries(const Tensor& q, const Tensor& kv_b, const MlaShape& shape) override {
    return cpu::mla_absorb_queries(q, kv_b, dims(shape));
  }

  Tensor mla_expand_context(const Tensor& context, const Tensor& kv_b, const MlaShape& shape) override {
    return cpu::mla_expand_context(context, kv_b, dims(shape));
  }

  Tensor swiglu_mlp(const Tensor& x, const SwigluWeights& w) override {
    return cpu::swiglu_mlp(x, w.gate, w.up, w.down);
  }

  Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows) override { return cpu::gather_rows(x, rows); }

  Tensor lm_head(const Tensor& x, const Tensor& weight) override { return cpu::linear(x, weight); }

  Tensor load_weight(const Tensor& view, bool fp32) override { return fp32 ? view.to_f32() : view; }

  // NOTE: uninitialised, so that the host pages of blocks never handed out are never touched.
  Tensor kv_blocks(std::vector<int64_t> shape) override { return Tensor::empty(DType::F32, std::move(shape)); }

  Tensor to_host(const Tensor& x) override { return x; }

 private:
  static cpu::MlaDims dims(const MlaShape& s) {
    return {.heads = s.heads, .nope = s.nope, .rope = s.rope, .v = s.v, .rank = s.rank};
  }
};

}  // namespace

std::unique_ptr<DecoderOps> make_cpu_decoder_ops() { return std::make_unique<CpuDecoderOps>(); }

}  // namespace moe::model
