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
#include "attention.h"
#include "forward_timer.h"

namespace moe::model {

namespace {

class MlaAttention final : public Attention {
 public:
  MlaAttention(const ModelConfig& c, const WeightReader& r, int64_t layer, const Rope& rope, DecoderOps& ops,
               ForwardTimes* times)
      : c_(c), rope_(rope), ops_(ops), times_(times) {
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
    const int64_t nh = c_.num_heads, rank = c_.kv_lora_rank, dk = rank + c_.qk_rope_head_dim;
    const MlaShape shape{.heads = nh, .nope = c_.qk_nope_head_dim, .rope = c_.qk_rope_head_dim, .v = c_.v_head_dim,
                         .rank = rank};
    Tensor q, ckv;  // [T, nh, nope + rope], [T, rank + rope]
    timed(times_, &ForwardTimes::attention_projections, [&] {
      if (q_.defined()) {
        q = ops_.linear(x, q_, {});
      } else {
        Tensor qa = ops_.linear(x, q_a_, q_a_bias_);  // [T, q_lora_rank]
        ops_.rms_norm(qa, q_a_norm_, c_.rms_norm_eps, qa.size(1));
        q = ops_.linear(qa, q_b_, {});
      }
      ckv = ops_.linear(x, kv_a_, kv_a_bias_);
    });
    const Tensor q_latent = timed(times_, &ForwardTimes::attention_other, [&] {
      // RoPE on q's rotary part and on k_rot; kv_a_layernorm on the latent: ckv becomes the cache's key
      // rows [latent | k_rot], its latent part the value rows.
      ops_.rope(rope_, q, nh, c_.qk_nope_head_dim, batch.positions);
      ops_.rope(rope_, ckv, 1, rank, batch.positions);
      ops_.rms_norm_prefix(ckv, kv_a_norm_, c_.rms_norm_eps, rank);
      ops_.append_kv(cache, layer, batch, ckv, ckv.narrow(1, 0, rank));
      return ops_.mla_absorb_queries(q, kv_b_, shape);  // [T, nh, rank + rope]
    });
    const Tensor context = timed(times_, &ForwardTimes::attention_core, [&] {
      return ops_.attention(q_latent, cache, layer, batch,
                            {.heads = nh, .kv_heads = 1, .dk = dk, .dv = rank, .scale = c_.softmax_scale});
    });  // [T, nh, rank]
    const Tensor out =
        timed(times_, &ForwardTimes::attention_other, [&] { return ops_.mla_expand_context(context, kv_b_, shape); });
    return timed(times_, &ForwardTimes::attention_projections, [&] { return ops_.linear(out, o_, o_bias_); });  // [T, H]
  }

 private:
  const ModelConfig& c_;
  const Rope& rope_;
  DecoderOps& ops_;
  ForwardTimes* times_;  // may be null
  Tensor q_, q_a_, q_b_, kv_a_, kv_b_, o_;  // [out, in] checkpoint views
  Tensor q_a_bias_, kv_a_bias_, o_bias_;    // F32 or undefined
  Tensor q_a_norm_, kv_a_norm_;             // F32
};

}  // namespace

std::unique_ptr<Attention> make_mla_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, DecoderOps& ops, ForwardTimes* times) {
  return std::make_unique<MlaAttention>(config, reader, layer, rope, ops, times);
}

}  // namespace moe::model
