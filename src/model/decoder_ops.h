#pragma once
// The ops the decoder runs, behind one interface that a backend implements: the decoder (causal_lm.cpp,
// gqa_attention.cpp, mla_attention.cpp) composes layers from these calls only and never touches a tensor's
// data itself, so that the same decoder runs on any backend's ops. The CPU's (cpu_decoder_ops.cpp) call
// the ops of src/cpu/; tensors are F32 activations [rows, width] and the checkpoint's weights. Another
// backend's ops keep activations on their device in their own dtypes (the GPU's: engine/cuda_decoder_ops.cpp)
// and copy the weights to the device once, at load (load_weight).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/host_memory.h"
#include "kv_cache.h"
#include "moe/core/checkpoint.h"
#include "moe/core/expert_batch.h"
#include "moe/core/stream.h"
#include "moe/model/causal_lm.h"
#include "moe/model/model_config.h"
#include "rope.h"

namespace moe::model {

// Where each sequence's new tokens sit in the batch.
struct BatchLayout {
  struct Span {
    int64_t seq = 0;    // sequence index in the cache
    int64_t row = 0;    // first row of the batch
    int64_t count = 0;  // new tokens (> 0)
    int64_t start = 0;  // position of the first new token (tokens already cached)
    // A recorded step's padding row (decode_graphs.h): a copy of span 0's row that writes nothing to the
    // cache, so that a step of fewer rows than its recording computes what a real row would.
    bool pad = false;
  };
  std::vector<Span> spans;
  std::vector<int64_t> positions;  // [T] position of each batch row in its sequence
  int64_t total = 0;
};

// One forward's inputs, given to the ops before its first op (DecoderOps::begin_step), so that a device's ops
// send them over once (ids, positions, cache slots, block tables, the rows lm_head reads, the token choices)
// rather than with each op.
struct StepInputs {
  const BatchLayout& batch;
  std::span<const int32_t> ids;        // [T] the batch's tokens
  const ModelKvCache& cache;
  std::span<const int64_t> last_rows;  // the rows gather_rows keeps, or empty
  std::span<const TokenChoice> choices;  // one per span with a choice, or empty
  // A recorded step's: the tables sit at addresses fixed for this many rows (the recording's bucket).
  int64_t recorded_rows = 0;
};

// A forward's work recorded once and replayed (a CUDA graph): replay() redoes it on the inputs that
// begin_step put at the recording's addresses.
class RecordedStep {
 public:
  virtual ~RecordedStep() = default;
  virtual void replay() = 0;
};

// Attention's heads: query head h reads KV head h / (heads / kv_heads).
struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, dk = 0, dv = 0;
  double scale = 1.0;  // multiplies q·k
};

// Per-head RMSNorm weights of q and k ([head_dim] F32 each; undefined: no norm) and their epsilon.
struct HeadNorms {
  Tensor q, k;
  double eps = 0;
};

// Multi-head latent attention's sizes, for its absorbed kv_b_proj products.
struct MlaShape {
  int64_t heads = 0, nope = 0, rope = 0, v = 0, rank = 0;
};

class DecoderOps {
 public:
  virtual ~DecoderOps() = default;

  // Rows `ids` of the table [V, H] -> [n, H]; an id outside [0, V) is a moe::Error naming it.
  virtual Tensor embedding(const Tensor& table, std::span<const int32_t> ids) = 0;
  // residual [T, H] += delta (undefined: nothing to add), then its RMSNorm by weight [H] -> [T, H].
  virtual Tensor add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, double eps) = 0;
  // In place over each group of `width` columns of x [T, n] (q/k norms: whole rows or per head).
  virtual void rms_norm(Tensor& x, const Tensor& weight, double eps, int64_t width) = 0;
  // In place over columns [0, width) of each row of x [T, n] (MLA's latent inside [latent | k_rot]).
  virtual void rms_norm_prefix(Tensor& x, const Tensor& weight, double eps, int64_t width) = 0;
  // x [T, in] · weight [out, in]ᵀ (+ bias [out], or undefined) -> [T, out].
  virtual Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) = 0;
  // x clamped to [-clip, clip] in place.
  virtual void clamp(Tensor& x, float clip) = 0;
  // RoPE in place on columns [offset, offset + rope dim) of every head of x [T, heads · stride], row t at
  // positions[t].
  virtual void rope(const Rope& rope, Tensor& x, int64_t heads, int64_t offset,
                    std::span<const int64_t> positions) = 0;
  // The batch's new keys [T, key_row] and values [T, value_row] (strided views allowed) into the cache.
  virtual void append_kv(ModelKvCache& cache, int64_t layer, const BatchLayout& batch, const Tensor& keys,
                         const Tensor& values) = 0;
  // The attention's inputs from its projections: the per-head RMSNorm of q and k where `norms` has their
  // weights ([dk] F32), RoPE on every head of both from column 0 (rows at batch.positions), then the keys
  // and values into the cache; q and k in place. q [T, heads · dk], k and v [T, kv_heads · dk], each may be
  // a row-strided view (of one fused projection's output). The default calls rms_norm, rope and
  // append_kv; a device's ops do it in one pass.
  virtual void attention_inputs(Tensor& q, Tensor& k, const Tensor& v, const HeadNorms& norms, const Rope& rope,
                                const AttentionShape& shape, ModelKvCache& cache, int64_t layer,
                                const BatchLayout& batch);
  // Causal attention of q [T, heads, dk] (a row-strided view allowed) against each span's cached keys and
  // values -> [T, heads · dv].
  virtual Tensor attention(const Tensor& q, const ModelKvCache& cache, int64_t layer, const BatchLayout& batch,
                           const AttentionShape& shape) = 0;
  // MLA: q [T, heads, nope + rope] -> [T, heads, rank + rope] through kv_b_proj's W_uk (mla_attention.cpp).
  virtual Tensor mla_absorb_queries(const Tensor& q, const Tensor& kv_b, const MlaShape& shape) = 0;
  // MLA: context [T, heads, rank] -> [T, heads · v] through kv_b_proj's W_uv.
  virtual Tensor mla_expand_context(const Tensor& context, const Tensor& kv_b, const MlaShape& shape) = 0;
  // The dense MLP of a non-MoE layer: x [T, H] -> [T, H].
  virtual Tensor swiglu_mlp(const Tensor& x, const SwigluWeights& weights) = 0;
  // Rows `rows` of x [T, H] -> [n, H].
  virtual Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows) = 0;
  // The logits: x [n, H] · lm_head [V, H]ᵀ -> [n, V] F32.
  virtual Tensor lm_head(const Tensor& x, const Tensor& weight) = 0;
  // The token choices[i] picks from row i of logits [n, V] F32 (lm_head's), as host ids [n]; the default
  // brings the logits to the host and chooses there (token_choice.h).
  virtual std::vector<int32_t> choose_tokens(const Tensor& logits, std::span<const TokenChoice> choices);
  // The same ids into ids [n] I32 in the ops' memory, without waiting for them (a recorded step's); -1 for
  // a row whose logits are not finite. The default chooses on the host.
  virtual void choose_tokens_into(const Tensor& logits, std::span<const TokenChoice> choices, Tensor& ids);

  // The step's tables, before its first op; the CPU's ops read them from the calls' arguments instead.
  virtual void begin_step(const StepInputs& step) { (void)step; }
  // The work `enqueue` gives these ops, recorded for replay and not run; null where the ops cannot record
  // (the CPU's, which run each op as it is called).
  virtual std::unique_ptr<RecordedStep> record(const std::function<void()>& enqueue) {
    (void)enqueue;
    return nullptr;
  }
  // The queue the ops run on, which the MoE blocks on their device must use too.
  virtual Stream stream() const { return {}; }
  // Uninitialised memory in the ops' memory (a recorded step's outputs).
  virtual Tensor empty(DType dtype, std::vector<int64_t> shape) { return Tensor::empty(dtype, std::move(shape)); }

  // Weights stacked by rows into one ([n_i, ...] -> [sum n_i, ...]), so that projections of the same input run
  // as one product (q, k and v); undefined where the ops gain nothing from it and keep them apart (the
  // CPU's, whose weights are views of the checkpoint's memory map). Called at load, on load_weight's results.
  virtual Tensor fuse_rows(std::span<const Tensor> weights) {
    (void)weights;
    return {};
  }
  // A checkpoint view as these ops keep it, called once per weight at load: the CPU's keep the view (fp32:
  // converted to F32), the GPU's a device copy (bf16; fp32: F32).
  virtual Tensor load_weight(const Tensor& view, bool fp32) = 0;
  // Memory for one layer's keys or values in the KV block pool: [num_blocks, block_tokens, row] F32 on the
  // ops' device, uninitialised (kv_cache.h).
  virtual Tensor kv_blocks(std::vector<int64_t> shape) = 0;
  // x as a host tensor (itself where it already is one): the logits and the routing the caller reads.
  virtual Tensor to_host(const Tensor& x) = 0;
  // Every tensor of xs as a host tensor, in order: a device's ops copy them all before they wait once (the
  // routing of every layer after a forward: one wait, not two a layer).
  virtual std::vector<Tensor> to_host_all(std::span<const Tensor> xs);
  // Bytes free for kv_blocks on the ops' device (the host's available memory here; a GPU's ops say theirs).
  virtual int64_t memory_available() const { return host_available_memory(); }
};

// The CPU's ops (src/cpu/), in fp32.
std::unique_ptr<DecoderOps> make_cpu_decoder_ops();

// CausalLM::load with the decoder on `ops` (CausalLM::load passes the CPU's).
std::unique_ptr<CausalLM> load_causal_lm(const std::filesystem::path& dir, const ModelOptions& options,
                                         std::unique_ptr<DecoderOps> ops);
// The same from a parsed config and its weights (a checkpoint without files: Checkpoint::generated).
std::unique_ptr<CausalLM> load_causal_lm(ModelConfig config, Checkpoint checkpoint,
                                         const ModelOptions& options, std::unique_ptr<DecoderOps> ops);

}  // namespace moe::model
