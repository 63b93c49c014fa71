#include "moe/engine/generation.h"

#include <fmt/core.h>

#include <algorithm>
#include <limits>

#include "moe/core/check.h"
#include "core/json_config.h"
#include "core/text_file.h"

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

SamplingParams generation_config_sampling(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return {};
  const nlohmann::json j = read_json_file(path, "generation config file");
  try {
    MOE_CHECK(j.is_object(), "it must hold a JSON object");
    if (!json_config::get_bool(j, "do_sample", false)) return {};
    const SamplingParams params{.temperature = json_config::get_double(j, "temperature", 1.0),
                                .top_k = static_cast<int>(std::clamp<int64_t>(
                                    json_config::get_int(j, "top_k", 50), -1, std::numeric_limits<int>::max())),
                                .top_p = json_config::get_double(j, "top_p", 1.0)};
    check_sampling_params(params);
    return params;
  } catch (const Error& e) {
    MOE_FAIL("{}: {}", path.string(), e.what());
  }
}

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
