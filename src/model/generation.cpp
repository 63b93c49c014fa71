#include "moe/model/generation.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include "moe/core/check.h"

namespace moe::model {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_prompts(std::span<const std::vector<int32_t>> prompts, const ModelInfo& info) {
  MOE_CHECK(!prompts.empty(), "generation needs at least one prompt");
  for (size_t s = 0; s < prompts.size(); ++s) {
    MOE_CHECK(!prompts[s].empty(), "prompt {} has no tokens: give at least one token id (or non-empty text)", s);
    for (int32_t id : prompts[s])
      MOE_CHECK(id >= 0 && id < info.vocab_size, "prompt {}: token id {} is outside the vocabulary [0, {})", s, id,
                info.vocab_size);
  }
}

// Row `row` of logits [rows, vocab] F32.
std::span<const float> logits_row(const Tensor& logits, int64_t row) {
  const int64_t vocab = logits.size(1);
  return {logits.data_as<float>() + row * vocab, static_cast<size_t>(vocab)};
}

void check_logits(const Tensor& logits, int64_t rows) {
  MOE_CHECK(logits.dtype() == DType::F32 && logits.dim() == 2 && logits.size(0) == rows && logits.is_contiguous(),
            "the model returned logits {} {}, expected a contiguous F32 [{}, vocab]", dtype_name(logits.dtype()),
            logits.shape_string(), rows);
}

// Counts each routing event into its layer's prompt or generated counts, then passes it on.
class LoadCounter {
 public:
  LoadCounter(const ModelInfo& info, std::span<const std::vector<int32_t>> prompts, RoutingObserver next,
              std::vector<LayerLoad>& layers)
      : next_(std::move(next)), layers_(layers), num_experts_(info.num_experts) {
    for (const auto& p : prompts) prompt_lengths_.push_back(static_cast<int64_t>(p.size()));
    for (int64_t layer : info.moe_layers) {
      slots_[layer] = layers_.size();
      layers_.push_back({.layer = layer,
                         .prompt_counts = std::vector<int64_t>(num_experts_, 0),
                         .generated_counts = std::vector<int64_t>(num_experts_, 0)});
    }
  }

  void operator()(const RoutingEvent& event) {
    {
      // NOTE: the model may report from several threads; the counts are the only shared state here.
      std::lock_guard lock(mutex_);
      const auto slot = slots_.find(event.layer);
      MOE_CHECK(slot != slots_.end(), "routing event for layer {}, which ModelInfo does not list as a MoE layer",
                event.layer);
      MOE_CHECK(event.seq >= 0 && event.seq < static_cast<int64_t>(prompt_lengths_.size()),
                "routing event for sequence {} of {}", event.seq, prompt_lengths_.size());
      LayerLoad& load = layers_[slot->second];
      const bool prompt = event.pos < prompt_lengths_[event.seq];
      auto& counts = prompt ? load.prompt_counts : load.generated_counts;
      ++(prompt ? load.prompt_tokens : load.generated_tokens);
      for (int32_t e : event.experts) {
        MOE_CHECK(e >= 0 && e < num_experts_, "routing event names expert {} of {}", e, num_experts_);
        ++counts[e];
      }
    }
    if (next_) next_(event);
  }

 private:
  RoutingObserver next_;
  std::vector<LayerLoad>& layers_;
  int64_t num_experts_;
  std::vector<int64_t> prompt_lengths_;
  std::unordered_map<int64_t, size_t> slots_;
  std::mutex mutex_;
};

}  // namespace

GenerationResult generate(CausalLM& model, std::span<const std::vector<int32_t>> prompts,
                          const GenerationOptions& options) {
  const ModelInfo& info = model.info();
  check_prompts(prompts, info);
  check_sampling_params(options.sampling);
  MOE_CHECK(options.max_new_tokens >= 0, "max_new_tokens must be >= 0, got {}", options.max_new_tokens);
  MOE_CHECK(options.max_batched_tokens >= 1, "max_batched_tokens must be >= 1, got {}", options.max_batched_tokens);

  const auto n = static_cast<int64_t>(prompts.size());
  int64_t max_length = 0, total_prompt = 0;
  for (const auto& p : prompts) {
    max_length = std::max(max_length, static_cast<int64_t>(p.size()) + options.max_new_tokens);
    total_prompt += static_cast<int64_t>(p.size());
  }

  GenerationResult result;
  result.generated.resize(n);
  result.stopped_at_eos.assign(n, false);
  auto counter = std::make_shared<LoadCounter>(info, prompts, options.on_routing, result.layers);
  const RoutingObserver observer = [counter](const RoutingEvent& event) { (*counter)(event); };
  const std::unique_ptr<KvCache> cache = model.new_cache(n, max_length);
  Sampler sampler(options.sampling, n);

  const auto is_eos = [&](int32_t id) {
    return std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), id) != info.eos_token_ids.end();
  };
  const auto take = [&](int64_t s, std::span<const float> logits) {
    const int32_t token = sampler.next(s, logits);
    result.generated[s].push_back(token);
    if (is_eos(token)) result.stopped_at_eos[s] = true;
  };
  const auto unfinished = [&](int64_t s) {
    return !result.stopped_at_eos[s] && static_cast<int64_t>(result.generated[s].size()) < options.max_new_tokens;
  };

  // Prefill: fill each forward with up to max_batched_tokens prompt tokens, sequence after sequence; a
  // sequence's first new token comes from the forward that holds the end of its prompt.
  const auto prefill_start = Clock::now();
  std::vector<std::vector<int32_t>> batch(n);
  int64_t s = 0, offset = 0, done = 0;
  while (s < n) {
    for (auto& b : batch) b.clear();
    std::vector<std::pair<int64_t, bool>> rows;  // (sequence, its prompt ends here), in sequence order
    int64_t room = options.max_batched_tokens;
    while (room > 0 && s < n) {
      const auto length = static_cast<int64_t>(prompts[s].size());
      const int64_t count = std::min(room, length - offset);
      batch[s].assign(prompts[s].begin() + offset, prompts[s].begin() + offset + count);
      offset += count;
      room -= count;
      done += count;
      rows.emplace_back(s, offset == length);
      if (offset == length) {
        ++s;
        offset = 0;
      }
    }
    const Tensor logits = model.forward(batch, *cache, /*last_only=*/true, observer);
    check_logits(logits, static_cast<int64_t>(rows.size()));
    for (size_t r = 0; r < rows.size(); ++r)
      if (rows[r].second && options.max_new_tokens > 0) take(rows[r].first, logits_row(logits, r));
    if (options.progress && total_prompt > options.max_batched_tokens)
      options.progress(fmt::format("prefill {}/{} tokens", done, total_prompt));
  }
  result.prefill_tokens = total_prompt;
  result.prefill_seconds = seconds_since(prefill_start);

  // Decode: the last token of every unfinished sequence, in one forward per step.
  const auto decode_start = Clock::now();
  while (true) {
    std::vector<int64_t> running;
    for (int64_t q = 0; q < n; ++q) {
      batch[q].clear();
      if (unfinished(q)) {
        batch[q].push_back(result.generated[q].back());
        running.push_back(q);
      }
    }
    if (running.empty()) break;
    const Tensor logits = model.forward(batch, *cache, /*last_only=*/true, observer);
    check_logits(logits, static_cast<int64_t>(running.size()));
    for (size_t r = 0; r < running.size(); ++r) take(running[r], logits_row(logits, r));
    result.decode_tokens += static_cast<int64_t>(running.size());
  }
  result.decode_seconds = seconds_since(decode_start);
  return result;
}

}  // namespace moe::model
