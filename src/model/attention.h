#pragma once
// Self-attention of one decoder layer over a batch of sequences: the projections run on all the batch's
// tokens at once, the attention itself per sequence against that sequence's cache (causal; scores and
// softmax in fp32 on the kernels of linear_kernels.h). GQA (Mixtral, Qwen2/3-MoE, OLMoE) and MLA
// (DeepSeek-V2/V3).

#include <cstdint>
#include <memory>
#include <vector>

#include "kv_cache.h"
#include "rope.h"
#include "weight_reader.h"
#include "moe/model/causal_lm.h"
#include "moe/model/model_config.h"

namespace moe::model {

// Where each sequence's new tokens sit in the batch.
struct BatchLayout {
  struct Span {
    int64_t seq = 0;    // sequence index in the cache
    int64_t row = 0;    // first row of the batch
    int64_t count = 0;  // new tokens (> 0)
    int64_t start = 0;  // position of the first new token (tokens already cached)
  };
  std::vector<Span> spans;
  std::vector<int64_t> positions;  // [T] position of each batch row in its sequence
  int64_t total = 0;
};

class Attention {
 public:
  virtual ~Attention() = default;
  // x [T, H] F32 (after input_layernorm) -> [T, H] F32; appends this layer's key/value rows to the cache.
  virtual Tensor forward(const Tensor& x, const BatchLayout& batch, ModelKvCache& cache, int64_t layer) = 0;
};

// Weights of decoder layer `layer` ("model.layers.N.self_attn.*"), checked against the config. `times`
// (may be null): where forward adds the time of its parts.
std::unique_ptr<Attention> make_gqa_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, ForwardTimes* times);
std::unique_ptr<Attention> make_mla_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, ForwardTimes* times);

// The attention core: q [T, n_heads, dk] F32 (rows in batch order) against the cached keys [len, kv_heads,
// dk] and values [len, kv_heads, dv] of each span's sequence (its new rows already written); query head h
// reads kv head h / (n_heads / kv_heads). Token i of a span sees cache rows [0, start + i] (causal; no
// sliding window: new_cache refuses lengths where one would bite). -> out [T, n_heads, dv] F32.
void attend(const Tensor& q, const BatchLayout& batch, const ModelKvCache& cache, int64_t layer, int64_t n_heads,
            int64_t kv_heads, int64_t dk, int64_t dv, double scale, Tensor& out);

}  // namespace moe::model
