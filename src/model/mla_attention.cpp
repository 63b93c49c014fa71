// Multi-head latent attention (DeepSeek-V2/V3), as transformers 5.17's DeepseekV{2,3}Attention.forward:
//   q = q_proj(x), or q_b_proj(q_a_layernorm(q_a_proj(x)))           [T, heads, nope + rope]
//   [latent | k_rot] = kv_a_proj_with_mqa(x); latent = kv_a_layernorm(latent)
//   RoPE on q's rope part and on k_rot (one rotary key shared by all heads)
//   [k_nope | v] = kv_b_proj(latent) per head; key = [k_nope | k_rot], query = [q_nope | q_rot]
//   softmax(scale · q·k) v, o_proj.
// Computed with kv_b_proj absorbed (the same sums, associated differently), so that the cache holds only
// the latent and the rotary key per token, shared by all heads:
//   q·k = (W_ukᵀ q_nope)·latent + q_rot·k_rot        with W_uk[h] = kv_b_proj rows of head h's k_nope
//   out = W_uv · Σ_j p_j latent_j                     with W_uv[h] = kv_b_proj rows of head h's v
// i.e. ordinary attention with one KV head of keys [latent | k_rot] and values [latent], per-head queries
// [W_ukᵀ q_nope | q_rot], and W_uv applied to the result. DeepSeek-V3's cache per token and layer shrinks
// from heads · (qk_head_dim + v_head_dim) = 40960 floats to 2 · kv_lora_rank + qk_rope_head_dim = 1088.
#include <algorithm>

#include "attention.h"
#include "dense_ops.h"
#include "forward_timer.h"
#include "moe/core/thread_pool.h"

namespace moe::model {

namespace {

class MlaAttention final : public Attention {
 public:
  MlaAttention(const ModelConfig& c, const WeightReader& r, int64_t layer, const Rope& rope, ForwardTimes* times)
      : c_(c), rope_(rope), times_(times) {
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
    const int64_t T = x.size(0), nh = c_.num_heads, rank = c_.kv_lora_rank, dk = rank + c_.qk_rope_head_dim;
    Tensor q, ckv;  // [T, nh, nope + rope], [T, rank + rope]
    timed(times_, &ForwardTimes::attention_projections, [&] {
      if (q_.defined()) {
        q = linear(x, q_);
      } else {
        Tensor qa = linear(x, q_a_, q_a_bias_);  // [T, q_lora_rank]
        rms_norm_rows(qa, q_a_norm_, c_.rms_norm_eps);
        q = linear(qa, q_b_);
      }
      ckv = linear(x, kv_a_, kv_a_bias_);
    });
    const Tensor q_latent =
        timed(times_, &ForwardTimes::attention_other, [&] { return to_latent(q, ckv, batch, cache, layer); });
    Tensor context = Tensor::empty(DType::F32, {T, nh * rank});  // [T, nh, rank]
    timed(times_, &ForwardTimes::attention_core,
          [&] { attend(q_latent, batch, cache, layer, nh, 1, dk, rank, c_.softmax_scale, context); });
    const Tensor out = timed(times_, &ForwardTimes::attention_other, [&] { return from_latent(context); });
    return timed(times_, &ForwardTimes::attention_projections, [&] { return linear(out, o_, o_bias_); });  // [T, H]
  }

 private:
  // RoPE, kv_a_layernorm, the cache rows [latent | k_rot] and [latent], and the queries in the latent space
  // [W_uk[h]ᵀ q_nope[h] | q_rot[h]] per head -> [T, nh, rank + rope].
  Tensor to_latent(Tensor& q, const Tensor& ckv, const BatchLayout& batch, ModelKvCache& cache, int64_t layer) const {
    const int64_t T = q.size(0), nh = c_.num_heads, nope = c_.qk_nope_head_dim, rope_dim = c_.qk_rope_head_dim;
    const int64_t dqk = nope + rope_dim, dv = c_.v_head_dim, rank = c_.kv_lora_rank, dk = rank + rope_dim;
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
    for (const BatchLayout::Span& s : batch.spans) {
      float* keys = cache.keys(layer, s.seq, s.count);      // [count, rank + rope]
      float* values = cache.values(layer, s.seq, s.count);  // [count, rank]
      for (int64_t i = 0; i < s.count; ++i) {
        const int64_t t = s.row + i;
        std::copy_n(latent.data_as<float>() + t * rank, rank, keys + i * dk);
        std::copy_n(k_rot.data() + t * rope_dim, rope_dim, keys + i * dk + rank);
        std::copy_n(latent.data_as<float>() + t * rank, rank, values + i * rank);
      }
    }
    Tensor q_latent = Tensor::empty(DType::F32, {T, nh * dk});  // [T, nh, rank + rope]
    float* ql = q_latent.data_as<float>();
    const float* qs = q.data_as<float>();
    const LinearIsa isa = linear_isa();
    ThreadPool::global().parallel_for(nh, 1, [&](int64_t h0, int64_t h1) {
      std::vector<const float*> q_nope(T);
      std::vector<float*> dst(T);
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          q_nope[t] = qs + (t * nh + h) * dqk;
          dst[t] = ql + (t * nh + h) * dk;
          std::copy_n(q_nope[t] + nope, rope_dim, dst[t] + rank);
        }
        const Tensor w_uk = kv_b_.narrow(0, h * (nope + dv), nope);  // [nope, rank]
        axpy_rows(isa,
                  {.a = q_nope.data(), .n = T, .j = nope, .w = w_uk.data(), .w_dtype = w_uk.dtype(),
                   .w_stride = w_uk.strides()[0], .y = dst.data()},
                  0, rank);
      }
    });
    return q_latent;
  }

  // Back from the latent space: out[h] = W_uv[h] · context[h] -> [T, nh * dv].
  Tensor from_latent(const Tensor& context) const {
    const int64_t T = context.size(0), nh = c_.num_heads, nope = c_.qk_nope_head_dim, dv = c_.v_head_dim;
    const int64_t rank = c_.kv_lora_rank;
    Tensor out = Tensor::empty(DType::F32, {T, nh * dv});  // [T, nh * dv]
    const LinearIsa isa = linear_isa();
    ThreadPool::global().parallel_for(nh, 1, [&](int64_t h0, int64_t h1) {
      std::vector<const float*> ctx(T);
      std::vector<float*> dst(T);
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          ctx[t] = context.data_as<float>() + (t * nh + h) * rank;
          dst[t] = out.data_as<float>() + (t * nh + h) * dv;
        }
        const Tensor w_uv = kv_b_.narrow(0, h * (nope + dv) + nope, dv);  // [dv, rank]
        dot_rows(isa,
                 {.x = ctx.data(), .n = T, .k = rank, .w = w_uv.data(), .w_dtype = w_uv.dtype(),
                  .w_stride = w_uv.strides()[0], .y = dst.data()},
                 0, dv);
      }
    });
    return out;
  }

  const ModelConfig& c_;
  const Rope& rope_;
  ForwardTimes* times_;  // may be null
  Tensor q_, q_a_, q_b_, kv_a_, kv_b_, o_;  // [out, in] checkpoint views
  Tensor q_a_bias_, kv_a_bias_, o_bias_;    // F32 or undefined
  Tensor q_a_norm_, kv_a_norm_;             // F32
};

}  // namespace

std::unique_ptr<Attention> make_mla_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, ForwardTimes* times) {
  return std::make_unique<MlaAttention>(config, reader, layer, rope, times);
}

}  // namespace moe::model
