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
  // The most prompt tokens in one prefill step's forward (a longer prompt is prefilled over several
  // steps). A decode step runs one token per running request, however many that is.
  int64_t max_num_batched_tokens = 4096;
  // The most requests run together: the Engine starts a batch of at most this many waiting requests once
  // the previous batch has finished.
  int64_t max_num_seqs = 256;
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
