// Multi-head latent attention (DeepSeek-V2/V3), as transformers 5.17's DeepseekV{2,3}Attention.forward:
//   q = q_proj(x), or q_b_proj(q_a_layernorm(q_a_proj(x)))           [T, heads, nope + rope]
//   [latent | k_rot] = kv_a_proj_with_mqa(x); latent = kv_a_layernorm(latent)
//   RoPE on q's rope part and on k_rot (one rotary key shared by all heads)
//   [k_nope | v] = kv_b_proj(latent) per head; key = [k_nope | k_rot], query = [q_nope | q_rot]
//   softmax(scale · q·k) v, o_proj.
// The cache holds the expanded per-head keys and values (see kv_cache.h for why).
#include <algorithm>

#include "attention.h"
#include "dense_ops.h"

namespace moe::model {

namespace {

class MlaAttention final : public Attention {
 public:
  MlaAttention(const ModelConfig& c, const WeightReader& r, int64_t layer, const Rope& rope) : c_(c), rope_(rope) {
    const std::string p = fmt::format("model.layers.{}.self_attn.", layer);
    const int64_t H = c.hidden_size, nh = c.num_heads, dqk = c.qk_head_dim(), rope_dim = c.qk_rope_head_dim;
    const std::string q_why = fmt::format("num_attention_heads {} x (qk_nope_head_dim {} + qk_rope_head_dim {})", nh,
                                          c.qk_nope_head_dim, rope_dim);
    if (c.q_lora_rank > 0) {
      const std::string why = fmt::format("q_lora_rank {}, hidden_size {}", c.q_lora_rank, H);
      q_a_ = r.get(p + "q_a_proj.weight", {c.q_lora_rank, H}, why);
      if (c.attention_bias) q_a_bias_ = r.get_f32(p + "q_a_proj.bias", {c.q_lora_rank}, why);
      q_a_norm_ = r.get_f32(p + "q_a_layernorm.weight", {c.q_lora_rank}, why);
      q_b_ = r.get(p + "q_b_proj.weight", {nh * dqk, c.q_lora_rank}, q_why + ", q_lora_rank");
    } else {
      q_ = r.get(p + "q_proj.weight", {nh * dqk, H}, q_why + ", hidden_size (q_lora_rank null)");
    }
    const std::string kv_why = fmt::format("kv_lora_rank {} + qk_rope_head_dim {}, hidden_size {}", c.kv_lora_rank,
                                           rope_dim, H);
    kv_a_ = r.get(p + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + rope_dim, H}, kv_why);
    if (c.attention_bias) kv_a_bias_ = r.get_f32(p + "kv_a_proj_with_mqa.bias", {c.kv_lora_rank + rope_dim}, kv_why);
    kv_a_norm_ = r.get_f32(p + "kv_a_layernorm.weight", {c.kv_lora_rank}, "kv_lora_rank");
    kv_b_ = r.get(p + "kv_b_proj.weight", {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
                  fmt::format("num_attention_heads {} x (qk_nope_head_dim {} + v_head_dim {}), kv_lora_rank {}", nh,
                              c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank));
    o_ = r.get(p + "o_proj.weight", {H, nh * c.v_head_dim},
               fmt::format("hidden_size {}, num_attention_heads {} x v_head_dim {}", H, nh, c.v_head_dim));
    if (c.attention_bias) o_bias_ = r.get_f32(p + "o_proj.bias", {H}, "hidden_size");
  }

  Tensor forward(const Tensor& x, const BatchLayout& batch, ModelKvCache& cache, int64_t layer) override {
    const int64_t T = x.size(0), nh = c_.num_heads, nope = c_.qk_nope_head_dim, rope_dim = c_.qk_rope_head_dim;
    const int64_t dqk = nope + rope_dim, dv = c_.v_head_dim, rank = c_.kv_lora_rank;
    Tensor q;  // [T, nh, nope + rope]
    if (q_.defined()) {
      q = linear(x, q_);
    } else {
      Tensor qa = linear(x, q_a_, q_a_bias_);  // [T, q_lora_rank]
      rms_norm_rows(qa, q_a_norm_, c_.rms_norm_eps);
      q = linear(qa, q_b_);
    }
    const Tensor ckv = linear(x, kv_a_, kv_a_bias_);  // [T, rank + rope]
    Tensor latent = Tensor::empty(DType::F32, {T, rank});  // [T, rank]
    std::vector<float> k_rot(T * rope_dim);                // [T, rope]
    for (int64_t t = 0; t < T; ++t) {
      const float* row = ckv.data_as<float>() + t * (rank + rope_dim);
      std::copy_n(row, rank, latent.data_as<float>() + t * rank);
      std::copy_n(row + rank, rope_dim, k_rot.data() + t * rope_dim);
      rope_.apply(k_rot.data() + t * rope_dim, batch.positions[t]);
      for (int64_t h = 0; h < nh; ++h) rope_.apply(q.data_as<float>() + (t * nh + h) * dqk + nope, batch.positions[t]);
    }
    rms_norm_rows(latent, kv_a_norm_, c_.rms_norm_eps);
    const Tensor kv = linear(latent, kv_b_);  // [T, nh, nope + dv]
    for (const BatchLayout::Span& s : batch.spans) {
      float* keys = cache.keys(layer, s.seq, s.count);      // [count, nh, dqk]
      float* values = cache.values(layer, s.seq, s.count);  // [count, nh, dv]
      for (int64_t i = 0; i < s.count; ++i) {
        const int64_t t = s.row + i;
        for (int64_t h = 0; h < nh; ++h) {
          const float* kv_row = kv.data_as<float>() + (t * nh + h) * (nope + dv);
          float* key = keys + (i * nh + h) * dqk;
          std::copy_n(kv_row, nope, key);
          std::copy_n(k_rot.data() + t * rope_dim, rope_dim, key + nope);
          std::copy_n(kv_row + nope, dv, values + (i * nh + h) * dv);
        }
      }
    }
    Tensor out = Tensor::empty(DType::F32, {T, nh * dv});  // [T, nh * dv]
    attend(q, batch, cache, layer, nh, nh, dqk, dv, c_.softmax_scale, out);
    return linear(out, o_, o_bias_);  // [T, H]
  }

 private:
  const ModelConfig& c_;
  const Rope& rope_;
  Tensor q_, q_a_, q_b_, kv_a_, kv_b_, o_;  // [out, in] checkpoint views
  Tensor q_a_bias_, kv_a_bias_, o_bias_;    // F32 or undefined
  Tensor q_a_norm_, kv_a_norm_;             // F32
};

}  // namespace

std::unique_ptr<Attention> make_mla_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope) {
  return std::make_unique<MlaAttention>(config, reader, layer, rope);
}

}  // namespace moe::model
