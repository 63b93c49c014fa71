#pragma once
// How an Engine runs: the model's own options, the step budget, and the routing observer. One step's token
// budget also sizes what a forward needs further down (the CUDA MoE blocks' workspace, the expert-parallel
// exchange's buffers); both are derived from it here, in one place.

#include <cstdint>

#include "moe/model/causal_lm.h"

namespace moe::engine {

struct EngineOptions {
  // Backend, CPU experts, load progress, forward times, and the MoE block hook (expert parallelism installs
  // its blocks there before Engine::load). Engine::load sets its max_batched_tokens to
  // moe_workspace_tokens(*this).
  model::ModelOptions model;
  // The most tokens in one step's forward: every decoding request's last token, then prompt chunks in
  // what is left (a longer prompt is prefilled over several steps). The decoding requests' tokens always
  // run, however many they are.
  int64_t max_num_batched_tokens = 4096;
  // The most requests run together; a waiting request joins the running ones at the next step that has
  // room for it (a free sequence, KV blocks for its first chunk, step budget).
  int64_t max_num_seqs = 256;
  // The longest sequence (prompt and generated tokens), at most the model's max_position_embeddings; 0: that.
  int64_t max_model_len = 0;
  // The KV cache's blocks (CausalLM::new_paged_cache); 0: room for max_num_seqs sequences of
  // max_model_len tokens, capped by kv_cache_memory_fraction. At least one sequence of max_model_len must fit.
  int64_t kv_cache_blocks = 0;
  // When > 0 (and kv_cache_blocks is 0), the KV cache takes at most this fraction of the host's available
  // memory at load (the pool lives in host memory).
  double kv_cache_memory_fraction = 0.0;
  // When > 0, the memory that fraction is of, instead of what the model finds available at load: ranks that
  // run one engine replica each (moe serve --enable-expert-parallel) pass one agreed value, so that their
  // pools, and so their schedules, are the same.
  int64_t kv_memory_bytes = 0;
  // Called for every (token, MoE layer) of the prompts and of the generated tokens run through the model
  // (each request's last token never is), with RoutingEvent::seq the request's id; may be empty. May be
  // called from several threads at once.
  model::RoutingObserver on_routing;
  // Whether Engine::load reads DIR/tokenizer.json. Off for callers that give token ids and need no text:
  // then a missing or broken tokenizer does not stop them.
  bool load_tokenizer = true;
};

// The CUDA MoE blocks' workspace in tokens (ModelOptions::max_batched_tokens): a prefill step's forward
// runs each MoE block in one piece.
int64_t moe_workspace_tokens(const EngineOptions& options);

// The expert-parallel exchange's buffers in tokens per rank and forward: a prefill step's tokens fit
// them in one exchange.
int64_t ep_exchange_tokens(const EngineOptions& options);

}  // namespace moe::engine
