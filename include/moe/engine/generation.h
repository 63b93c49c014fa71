#pragma once
// Batch generation over an Engine: a list of prompts submitted together as requests 0..n-1 (prompt s
// sampling from stream s) and stepped until every one has finished, as the Engine schedules them: prompts
// in chunks within EngineOptions::max_num_batched_tokens (a long prompt is split across several steps), a
// sequence whose prompt is in decoding from the next step on beside them. A sequence stops at any of the model's EOS
// ids (kept in its output, as transformers does) or after max_new_tokens tokens.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "moe/engine/engine.h"
#include "moe/engine/sampler.h"
#include "moe/engine/stats.h"

namespace moe::engine {

struct GenerationOptions {
  int64_t max_new_tokens = 32;  // >= 0; 0 runs the prefill alone
  SamplingParams sampling;      // temperature 0: greedy
  // Called after each prefill step when the prefill takes more than one ("prefill 4096/10000 tokens");
  // may be empty.
  std::function<void(const std::string&)> progress;
};

// The engine's stats over this run (EngineStats) and each sequence's tokens.
struct GenerationResult : EngineStats {
  std::vector<std::vector<int32_t>> generated;  // [sequences][new tokens], EOS included when reached
  std::vector<bool> stopped_at_eos;             // [sequences]
};

// The sampling defaults of DIR/generation_config.json, read as transformers' GenerationConfig does:
// do_sample false or absent (or no file) is greedy; do_sample true samples with the file's temperature,
// top_k and top_p (transformers' defaults 1.0, 50 and 1.0 where it has none). Throws moe::Error naming the
// file and the key for a malformed one.
SamplingParams generation_config_sampling(const std::filesystem::path& dir);

// Runs `prompts` (each non-empty, ids in [0, vocab)) through `engine`, which must have no unfinished
// requests. Throws moe::Error for no prompts, an empty prompt, an id outside the vocabulary, bad sampling
// parameters or max_new_tokens < 0.
GenerationResult generate(Engine& engine, std::span<const std::vector<int32_t>> prompts,
                          const GenerationOptions& options);

}  // namespace moe::engine
