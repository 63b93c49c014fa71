#pragma once
// Self-attention of one decoder layer over a batch of sequences, composed from DecoderOps: the projections
// run on all the batch's tokens at once, the attention itself per sequence against that sequence's cache.
// GQA (grouped KV heads, optional q/k norms, qkv biases, clip_qkv) and MLA (multi-head latent attention).

#include <cstdint>
#include <memory>
#include <vector>

#include "decoder_ops.h"
#include "kv_cache.h"
#include "rope.h"
#include "weight_reader.h"
#include "moe/model/causal_lm.h"
#include "moe/model/model_config.h"

namespace moe::model {

class Attention {
 public:
  virtual ~Attention() = default;
  // x [T, H] F32 (after input_layernorm) -> [T, H] F32; appends this layer's key/value rows to the cache.
  virtual Tensor forward(const Tensor& x, const BatchLayout& batch, ModelKvCache& cache, int64_t layer) = 0;
};

// Weights of decoder layer `layer` ("model.layers.N.self_attn.*"), checked against the config; forward runs
// on `ops`. `times` (may be null): where forward adds the time of its parts.
std::unique_ptr<Attention> make_gqa_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, DecoderOps& ops, ForwardTimes* times);
std::unique_ptr<Attention> make_mla_attention(const ModelConfig& config, const WeightReader& reader, int64_t layer,
                                              const Rope& rope, DecoderOps& ops, ForwardTimes* times);

}  // namespace moe::model
