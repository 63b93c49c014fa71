#pragma once
// What `moe generate` writes: the routing trace lines, the --json result, the --stats load statistics and
// the per-layer load summary it prints.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "moe/model/causal_lm.h"
#include "moe/engine/generation.h"

namespace moe::cli {

// One trace line: {"seq", "pos", "token", "layer", "experts", "weights"} in that order.
nlohmann::ordered_json trace_line(const model::RoutingEvent& event);

// {"prompt_ids", "generated_ids", "text", "prefill_tokens_per_s", "decode_tokens_per_s"}. One prompt: lists
// of ids and a string; several: a list per prompt of each (ids, texts). `texts` empty (no tokenizer): null.
nlohmann::ordered_json result_json(const std::vector<std::vector<int32_t>>& prompts,
                                   const engine::GenerationResult& result, const std::vector<std::string>& texts);

// {"model_type", "n_experts", "top_k", "prompt_tokens", "generated_tokens", "layers": {"N": LoadStats of all
// routed tokens}, "prompt": {"N": ...}, "generated": {"N": ...}, "totals": LoadStats over every MoE layer}.
nlohmann::ordered_json stats_json(const model::ModelInfo& info, const engine::GenerationResult& result);

// "layer 3: imbalance 2.10, hottest 5 (14.1%), 2 (9.8%), 11 (9.0%); dead: 0, 7" per MoE layer,
// over prompt and generated tokens together.
std::vector<std::string> load_summary(const model::ModelInfo& info, const engine::GenerationResult& result);

}  // namespace moe::cli
