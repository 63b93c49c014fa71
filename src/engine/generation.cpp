#include "moe/engine/generation.h"

#include <fmt/core.h>

#include "moe/core/check.h"

namespace moe::engine {

namespace {

void check_prompts(std::span<const std::vector<int32_t>> prompts, const model::ModelInfo& info) {
  MOE_CHECK(!prompts.empty(), "generation needs at least one prompt");
  for (size_t s = 0; s < prompts.size(); ++s) {
    MOE_CHECK(!prompts[s].empty(), "prompt {} has no tokens: give at least one token id (or non-empty text)", s);
    for (int32_t id : prompts[s])
      MOE_CHECK(id >= 0 && id < info.vocab_size, "prompt {}: token id {} is outside the vocabulary [0, {})", s, id,
                info.vocab_size);
  }
}

}  // namespace

GenerationResult generate(Engine& engine, std::span<const std::vector<int32_t>> prompts,
                          const GenerationOptions& options) {
  check_prompts(prompts, engine.info());
  check_sampling_params(options.sampling);
  MOE_CHECK(options.max_new_tokens >= 0, "max_new_tokens must be >= 0, got {}", options.max_new_tokens);
  MOE_CHECK(!engine.has_unfinished(),
            "generation runs its prompts alone: the engine still has unfinished requests (step them to the end first)");

  const EngineStats before = engine.stats();
  std::vector<RequestId> ids;
  int64_t total_prompt = 0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    ids.push_back(engine.submit({.prompt = prompts[s], .sampling = options.sampling,
                                 .max_new_tokens = options.max_new_tokens, .sample_stream = s}));
    total_prompt += static_cast<int64_t>(prompts[s].size());
  }
  int64_t prefilled = 0;
  while (engine.has_unfinished()) {
    const StepResult step = engine.step();
    if (step.kind != StepResult::Kind::prefill) continue;
    prefilled += step.prefill_tokens;
    if (options.progress && total_prompt > engine.options().max_num_batched_tokens)
      options.progress(fmt::format("prefill {}/{} tokens", prefilled, total_prompt));
  }

  GenerationResult result;
  static_cast<EngineStats&>(result) = stats_since(engine.stats(), before);
  for (RequestId id : ids) {
    const RequestResult& r = engine.result(id);
    result.generated.push_back(r.generated);
    result.stopped_at_eos.push_back(r.finish == FinishReason::stop);
  }
  return result;
}

}  // namespace moe::engine
