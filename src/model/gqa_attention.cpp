// Grouped-query attention (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE), as transformers 5.17's
// <Family>Attention.forward: q/k/v projections (+ Qwen2 biases), OLMoE's whole-projection q/k norms and
// clip_qkv, Qwen3's per-head q/k norms, RoPE, cache append, attention, o_proj. Where the ops take fused
// weights (DecoderOps::fuse_rows) and no whole-projection step sits between the projections and the heads'
// norms (OLMoE's norms and clip), q, k and v come out of one product as views of its output.
#include "attention.h"
#include "forward_timer.h"

namespace moe::model {

namespace {

class GqaAttention final : public Attention {
 public:
  GqaAttention(const ModelConfig& c, const WeightReader& r, int64_t layer, const Rope& rope, DecoderOps& ops,
               ForwardTimes* times)
      : c_(c), rope_(rope), ops_(ops), times_(times) {
    const std::string p = fmt::format("model.layers.{}.self_attn.", layer);
    const int64_t H = c.hidden_size, D = c.head_dim, q_width = c.num_heads * D, kv_width = c.num_kv_heads * D;
    const std::string q_why = fmt::format("num_attention_heads {} x head_dim {}, hidden_size {}", c.num_heads, D, H);
    const std::string kv_why = fmt::format("num_key_value_heads {} x head_dim {}, hidden_size {}", c.num_kv_heads, D, H);
    q_ = r.get(p + "q_proj.weight", {q_width, H}, q_why);
    k_ = r.get(p + "k_proj.weight", {kv_width, H}, kv_why);
    v_ = r.get(p + "v_proj.weight", {kv_width, H}, kv_why);
    o_ = r.get(p + "o_proj.weight", {H, q_width}, q_why);
    if (c.qkv_bias) {
      q_bias_ = r.get_f32(p + "q_proj.bias", {q_width}, q_why);
      k_bias_ = r.get_f32(p + "k_proj.bias", {kv_width}, kv_why);
      v_bias_ = r.get_f32(p + "v_proj.bias", {kv_width}, kv_why);
    }
    if (c.attention_bias) o_bias_ = r.get_f32(p + "o_proj.bias", {H}, "hidden_size");
    if (c.qk_norm != QkNorm::whole && c.clip_qkv == 0) {
      const Tensor weights[] = {q_, k_, v_};
      qkv_ = ops.fuse_rows(weights);
      if (qkv_.defined() && c.qkv_bias) {
        const Tensor biases[] = {q_bias_, k_bias_, v_bias_};
        qkv_bias_ = ops.fuse_rows(biases);
      }
      if (qkv_.defined()) q_ = k_ = v_ = q_bias_ = k_bias_ = v_bias_ = Tensor();
    }
    if (c.qk_norm == QkNorm::per_head) {
      q_norm_ = r.get_f32(p + "q_norm.weight", {D}, "head_dim");
      k_norm_ = r.get_f32(p + "k_norm.weight", {D}, "head_dim");
    } else if (c.qk_norm == QkNorm::whole) {
      // NOTE: OLMoE sizes k_norm as (hidden_size / num_attention_heads) · num_key_value_heads.
      q_norm_ = r.get_f32(p + "q_norm.weight", {q_width}, "num_attention_heads x head_dim");
      k_norm_ = r.get_f32(p + "k_norm.weight", {(H / c.num_heads) * c.num_kv_heads},
                          "hidden_size / num_attention_heads x num_key_value_heads");
    }
  }

  Tensor forward(const Tensor& x, const BatchLayout& batch, ModelKvCache& cache, int64_t layer) override {
    const int64_t D = c_.head_dim;
    Tensor q, k, v;
    timed(times_, &ForwardTimes::attention_projections, [&] {
      if (qkv_.defined()) {
        const Tensor qkv = ops_.linear(x, qkv_, qkv_bias_);  // [T, (nh + 2 nkv) * D]
        const int64_t q_width = c_.num_heads * D, kv_width = c_.num_kv_heads * D;
        q = qkv.narrow(1, 0, q_width);
        k = qkv.narrow(1, q_width, kv_width);
        v = qkv.narrow(1, q_width + kv_width, kv_width);
        return;
      }
      q = ops_.linear(x, q_, q_bias_);  // [T, nh * D]
      k = ops_.linear(x, k_, k_bias_);  // [T, nkv * D]
      v = ops_.linear(x, v_, v_bias_);  // [T, nkv * D]
    });
    timed(times_, &ForwardTimes::attention_other, [&] { prepare(q, k, v, batch, cache, layer); });
    const Tensor out = timed(times_, &ForwardTimes::attention_core, [&] {
      return ops_.attention(q, cache, layer, batch,
                            {.heads = c_.num_heads, .kv_heads = c_.num_kv_heads, .dk = D, .dv = D,
                             .scale = c_.softmax_scale});  // [T, nh * D]
    });
    return timed(times_, &ForwardTimes::attention_projections, [&] { return ops_.linear(out, o_, o_bias_); });  // [T, H]
  }

 private:
  // q/k norms, clip_qkv, RoPE, and the new keys and values into the cache.
  void prepare(Tensor& q, Tensor& k, Tensor& v, const BatchLayout& batch, ModelKvCache& cache, int64_t layer) const {
    if (c_.qk_norm == QkNorm::whole) {
      ops_.rms_norm(q, q_norm_, c_.rms_norm_eps, q.size(1));
      ops_.rms_norm(k, k_norm_, c_.rms_norm_eps, k.size(1));
    }
    if (c_.clip_qkv > 0)
      for (Tensor* t : {&q, &k, &v}) ops_.clamp(*t, static_cast<float>(c_.clip_qkv));
    HeadNorms norms;
    norms.eps = c_.rms_norm_eps;
    if (c_.qk_norm == QkNorm::per_head) {
      norms.q = q_norm_;
      norms.k = k_norm_;
    }
    ops_.attention_inputs(q, k, v, norms, rope_,
                          {.heads = c_.num_heads, .kv_heads = c_.num_kv_heads, .dk = c_.head_dim,
                           .dv = c_.head_dim},
                          cache, layer, batch);
  }

  const ModelConfig& c_;
  const Rope& rope_;
  DecoderOps& ops_;
  ForwardTimes* times_;  // may be null
  Tensor q_, k_, v_, o_;                       // [out, in] checkpoint views (q, k, v undefined when fused)
  Tensor qkv_, qkv_bias_;                      // q, k, v stacked (fuse_rows), or undefined
  Tensor q_bias_, k_bias_, v_bias_, o_bias_;   // F32 or undefined
  Tensor q_norm_, k_norm_;                     // F32 or undefined
};

}  // namespace

std::unique_ptr<Attention> make_gqa_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, DecoderOps& ops, ForwardTimes* times) {
  return std::make_unique<GqaAttention>(config, reader, layer, rope, ops, times);
}

}  // namespace moe::model
