#include "moe/engine/engine_options.h"

namespace moe::engine {

// NOTE: both are the step budget: a prefill step's forward is the largest a step runs in one piece; a
// longer forward (a decode step of more running requests than the budget) runs the MoE blocks and the
// exchange in pieces of this size.
int64_t moe_workspace_tokens(const EngineOptions& options) { return options.max_num_batched_tokens; }

int64_t ep_exchange_tokens(const EngineOptions& options) { return options.max_num_batched_tokens; }

}  // namespace moe::engine
