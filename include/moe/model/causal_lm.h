#pragma once
// A HuggingFace MoE causal language model (mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3)
// loaded from a model directory: embeddings, decoder layers (attention + MoE or dense MLP), final norm and
// lm_head, with a paged KV cache. The MoE blocks run through moe::MoeLayer on the CPU or the CUDA stages
// (ModelBackend::cuda); everything else runs on the CPU in fp32 here, or on the GPU with the decoder's ops
// there (engine/cuda_model.h).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moe/layer/moe_layer.h"

namespace moe::model {

enum class ModelBackend : uint8_t { cpu, cuda };

// Seconds spent in each part of the forward passes, summed over calls (ModelOptions::times; what
// `moe bench --model` reports). attention_other: q/k norms, RoPE, cache writes, MLA's per-head absorbed
// products; norms: the decoder's RMSNorms and residual adds.
// sampling: choosing the next tokens (forward_sample). `fence`, when set, runs before every clock read, so
// that a device's parts are timed to their completion (a profiling pass sets it to a device
// synchronisation; a timed pass leaves it empty).
struct ForwardTimes {
  double embedding = 0, norms = 0, attention_projections = 0, attention_core = 0, attention_other = 0;
  double moe = 0, dense_mlp = 0, lm_head = 0, sampling = 0, total = 0;
  std::function<void()> fence;
};

// How forward_sample picks a sequence's next token from its logits row: greedy (temperature 0: the largest
// logit, ties to the lower id), or a draw with temperature, then top-k (every token whose logit is at least
// the k-th largest, so ties at the boundary all stay), then top-p (the most likely tokens whose weight
// reaches top_p of the kept mass, ties at the boundary all staying), at `uniform` in [0, 1) of the kept
// tokens' cumulative weight in id order. The caller draws `uniform` from the sequence's own seeded generator.
struct TokenChoice {
  double temperature = 0.0;
  int top_k = 0;       // 0: all
  double top_p = 1.0;  // 1: all
  double uniform = 0.0;
};

struct ModelOptions {
  ModelBackend backend = ModelBackend::cpu;
  // CPU MoE experts: `reference` computes in fp32/fp64 from the checkpoint's weights (what the fixtures
  // are checked with); `fast` uses the optimised bf16/int8 kernels.
  CpuExperts cpu_experts = CpuExperts::reference;
  quant::WeightFormat cpu_weights = quant::WeightFormat::bf16;
  // The CUDA MoE blocks' workspace, in tokens; a larger forward runs its MoE blocks in chunks of this size.
  int64_t max_batched_tokens = 4096;
  // Called while loading, after each decoder layer, with the layers loaded and the model's (a progress
  // bar's figures); may be empty.
  std::function<void(int64_t loaded, int64_t layers)> progress;
  // When set, makes the MoE block of decoder layer `layer` from its config and checkpoint weights instead
  // of the backend's own: the returned function maps x [T, H] F32 (after post_attention_layernorm) to
  // hidden_states [T, H] F32 and topk [T, k]. Expert parallelism plugs in here (engine/expert_parallel.h).
  using MoeBlockFn = std::function<LayerOutput(const Tensor& x)>;
  std::function<MoeBlockFn(int64_t layer, const MoeConfig& config, MoeWeights weights)> moe_block;
  // When set, every forward adds the time of its parts here (owned by the caller, who must outlive the model).
  // Where its fence is set (a profiling pass) the forwards run op by op, never from a recording.
  ForwardTimes* times = nullptr;
  // On the GPU a decode step (one new token per sequence) replays a CUDA graph of the whole step, recorded
  // at its bucket's first step (decode_graphs.h); set, every step runs op by op (vLLM's --enforce-eager).
  bool enforce_eager = false;
};

// What a user needs to know about a loaded model.
struct ModelInfo {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> moe_layers;     // decoder layer indices N (of model.layers.N) that hold a MoE block
  int64_t num_experts = 0;
  int top_k = 0;
  std::vector<int32_t> eos_token_ids;  // config.json / generation_config.json eos_token_id (int or list)
  int32_t bos_token_id = -1;           // -1 when none
};

// One routing decision: token `pos` of sequence `seq` in MoE layer `layer` (decoder layer index).
struct RoutingEvent {
  int64_t seq = 0;
  int64_t pos = 0;
  int32_t token = 0;
  int64_t layer = 0;
  std::vector<int32_t> experts;  // top-k expert ids, in the router's order (highest score first)
  std::vector<float> weights;    // their routing weights (after renormalisation and scaling)
};
using RoutingObserver = std::function<void(const RoutingEvent&)>;

// The KV caches of a batch of sequences, each growing as tokens are appended (the model's is paged: blocks
// of 16 tokens from one pool, taken as a sequence grows).
class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual int64_t num_sequences() const = 0;
  virtual int64_t length(int64_t seq) const = 0;  // tokens already in sequence `seq`

  // Paging, for a scheduler that admits sequences by free blocks: a sequence of n tokens holds
  // ceil(n / block_tokens()) blocks; a forward takes the blocks its new tokens need and fails when the pool
  // has too few.
  virtual int64_t block_tokens() const = 0;
  virtual int64_t total_blocks() const = 0;
  virtual int64_t free_blocks() const = 0;
  virtual int64_t block_bytes() const = 0;  // every layer's keys and values of one block
  // Empties sequence `seq` and gives its blocks back, so that its slot can take another sequence.
  virtual void release(int64_t seq) = 0;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;

  // Loads DIR (config.json, model.safetensors or a sharded index; F32, BF16, F16 memory-mapped; fp8 and int4
  // checkpoints as quantization_config says, dequantised to BF16, quant/linear_weight.h). Throws
  // moe::Error naming the missing file or tensor, the shape that disagrees with the config, or the
  // unsupported model_type / feature.
  static std::unique_ptr<CausalLM> load(const std::filesystem::path& dir, const ModelOptions& options = {});

  virtual const ModelInfo& info() const = 0;

  // An empty cache for `num_sequences` sequences of at most `max_length` tokens each.
  virtual std::unique_ptr<KvCache> new_cache(int64_t num_sequences, int64_t max_length) const = 0;
  // The same with a pool of `num_blocks` blocks shared by the sequences (fewer than every sequence at
  // max_length needs: a scheduler then preempts a sequence when the pool runs out).
  virtual std::unique_ptr<KvCache> new_paged_cache(int64_t num_sequences, int64_t max_length,
                                                   int64_t num_blocks) const = 0;
  // Bytes free where the KV cache lives, after the weights: the host's available memory (the default), or
  // the GPU's free memory for the decoder on a GPU. A scheduler sizes its block pool as a fraction of it.
  virtual int64_t kv_memory_available() const;
  // The decode steps recorded for replay (CUDA graphs, one per bucket of rows; ModelOptions::enforce_eager).
  virtual int64_t recorded_decode_steps() const { return 0; }

  // Appends new_tokens[s] to sequence s (a sequence may get none) and runs them through the model in one
  // batch: the MoE blocks see all the batch's tokens at once, attention each sequence against its own
  // cache. Returns the logits [sum of new tokens, vocab] F32 in order (sequence 0's tokens first); with
  // last_only, one row per sequence that got tokens (its last new token). `observer`, when set, is called
  // for every (token, MoE layer).
  virtual Tensor forward(std::span<const std::vector<int32_t>> new_tokens, KvCache& cache, bool last_only,
                         const RoutingObserver& observer = {}) = 0;
  // forward with last_only, then the next token of each sequence that got tokens (in order), chosen by
  // choices[i] (one per such sequence) where the logits are: for the decoder on a GPU only the ids come back.
  // The default chooses on the host from forward's logits.
  virtual std::vector<int32_t> forward_sample(std::span<const std::vector<int32_t>> new_tokens,
                                              KvCache& cache, std::span<const TokenChoice> choices,
                                              const RoutingObserver& observer = {});
};

}  // namespace moe::model
