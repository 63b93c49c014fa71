// Grouped-query attention (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE), as transformers 5.17's
// <Family>Attention.forward: q/k/v projections (+ Qwen2 biases), OLMoE's whole-projection q/k norms and
// clip_qkv, Qwen3's per-head q/k norms, RoPE, cache append, attention, o_proj.
#include <algorithm>

#include "attention.h"
#include "dense_ops.h"
#include "forward_timer.h"

namespace moe::model {

namespace {

class GqaAttention final : public Attention {
 public:
  GqaAttention(const ModelConfig& c, const WeightReader& r, int64_t layer, const Rope& rope, ForwardTimes* times)
      : c_(c), rope_(rope), times_(times) {
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
    const int64_t T = x.size(0), D = c_.head_dim, nh = c_.num_heads, nkv = c_.num_kv_heads;
    Tensor q, k, v;
    timed(times_, &ForwardTimes::attention_projections, [&] {
      q = linear(x, q_, q_bias_);  // [T, nh * D]
      k = linear(x, k_, k_bias_);  // [T, nkv * D]
      v = linear(x, v_, v_bias_);  // [T, nkv * D]
    });
    timed(times_, &ForwardTimes::attention_other, [&] { prepare(q, k, v, batch, cache, layer); });
    Tensor out = Tensor::empty(DType::F32, {T, nh * D});  // [T, nh * D]
    timed(times_, &ForwardTimes::attention_core,
          [&] { attend(q, batch, cache, layer, nh, nkv, D, D, c_.softmax_scale, out); });
    return timed(times_, &ForwardTimes::attention_projections, [&] { return linear(out, o_, o_bias_); });  // [T, H]
  }

 private:
  // q/k norms, clip_qkv, RoPE, and the new keys and values into the cache.
  void prepare(Tensor& q, Tensor& k, Tensor& v, const BatchLayout& batch, ModelKvCache& cache, int64_t layer) const {
    const int64_t T = q.size(0), D = c_.head_dim, nh = c_.num_heads, nkv = c_.num_kv_heads;
    if (c_.qk_norm == QkNorm::whole) {
      rms_norm_rows(q, q_norm_, c_.rms_norm_eps);
      rms_norm_rows(k, k_norm_, c_.rms_norm_eps);
    } else if (c_.qk_norm == QkNorm::per_head) {
      rms_norm_groups(q, q_norm_, c_.rms_norm_eps, D);
      rms_norm_groups(k, k_norm_, c_.rms_norm_eps, D);
    }
    if (c_.clip_qkv > 0) {
      const auto clip = static_cast<float>(c_.clip_qkv);
      for (Tensor* t : {&q, &k, &v})
        for (float* p = t->data_as<float>(), *end = p + t->numel(); p != end; ++p) *p = std::clamp(*p, -clip, clip);
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < nh; ++h) rope_.apply(q.data_as<float>() + (t * nh + h) * D, batch.positions[t]);
      for (int64_t h = 0; h < nkv; ++h) rope_.apply(k.data_as<float>() + (t * nkv + h) * D, batch.positions[t]);
    }
    for (const BatchLayout::Span& s : batch.spans) {
      float* keys = cache.keys(layer, s.seq, s.count);
      float* values = cache.values(layer, s.seq, s.count);
      std::copy_n(k.data_as<float>() + s.row * nkv * D, s.count * nkv * D, keys);
      std::copy_n(v.data_as<float>() + s.row * nkv * D, s.count * nkv * D, values);
    }
  }

  const ModelConfig& c_;
  const Rope& rope_;
  ForwardTimes* times_;  // may be null
  Tensor q_, k_, v_, o_;                       // [out, in] checkpoint views
  Tensor q_bias_, k_bias_, v_bias_, o_bias_;   // F32 or undefined
  Tensor q_norm_, k_norm_;                     // F32 or undefined
};

}  // namespace

std::unique_ptr<Attention> make_gqa_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, ForwardTimes* times) {
  return std::make_unique<GqaAttention>(config, reader, layer, rope, times);
}

}  // namespace moe::model
