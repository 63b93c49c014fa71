#pragma once
// The Engine: a model directory loaded once (the model and, where DIR/tokenizer.json exists, its
// tokenizer), requests submitted and cancelled at any time, and step() running one forward at a time over
// them with iteration-level continuous batching:
//   - the running requests (at most max_num_seqs) each hold a sequence of the model's paged KV cache;
//   - a step gives every decoding request its last token, then the prefilling ones (oldest first) the next
//     chunks of their prompts within what is left of max_num_batched_tokens (a long prompt is prefilled
//     over several steps, mixed with the others' decode tokens);
//   - then waiting requests join, in submission order, while a sequence, the budget and free KV blocks
//     for their first chunk allow;
//   - when a running request needs a block and none is free, the newest running request is preempted: its
//     blocks go back to the pool and it waits at the head of the queue, to be recomputed from its prompt
//     and the tokens it has generated (never dropped; its sampler continues where it was).
// A request's tokens depend only on its own prompt, parameters and seed, never on the batch (the model's
// forward is per-row for a given sequence: its greedy tokens alone equal its tokens among others).
// Results and statistics are readable between steps. One caller at a time: the Engine is not thread-safe
// (the model may run a forward on many threads).

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "moe/engine/engine_options.h"
#include "moe/engine/request.h"
#include "moe/engine/stats.h"
#include "moe/model/causal_lm.h"
#include "moe/text/tokenizer.h"

namespace moe::engine {

class LoadCounter;  // src/engine/load_counter.h
class TextStream;   // src/engine/text_stream.h

// The CPU experts that suit DIR's checkpoint (ModelOptions::cpu_experts): the fast bf16 experts for BF16
// expert weights, the exact reference experts for F32 and F16 ones (a bf16 pass would throw their
// precision away).
CpuExperts default_cpu_experts(const std::filesystem::path& dir);

// What one step did.
struct StepResult {
  enum class Kind : uint8_t { idle, prefill, decode };
  // idle: nothing was waiting or running, no forward ran; prefill: the forward ran prompt tokens (or a
  // preempted request's recomputation), maybe with decode tokens; decode: only running requests' last tokens.
  Kind kind = Kind::idle;
  int64_t tokens = 0;                    // tokens run through the model
  int64_t prefill_tokens = 0;            // of which prompt or recomputed tokens
  std::vector<RequestOutput> outputs{};  // requests that got a token or finished, in request order
};

// The KV cache's blocks now.
struct KvUsage {
  int64_t block_tokens = 0;
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;
};

class Engine {
 public:
  // Loads DIR: the model (CausalLM::load with options.model) and DIR/tokenizer.json if it exists. Throws
  // moe::Error as CausalLM::load and Tokenizer::load do, and for bad options.
  static std::unique_ptr<Engine> load(const std::filesystem::path& dir, EngineOptions options);

  // An engine over a model loaded elsewhere (it must outlive the engine), without a tokenizer.
  // options.model is not used. Throws moe::Error for max_num_batched_tokens or max_num_seqs < 1, a
  // max_model_len < 1 or past the model's max_position_embeddings, or a KV cache too small for one
  // sequence of max_model_len.
  Engine(model::CausalLM& model, EngineOptions options);

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const model::ModelInfo& info() const { return model_->info(); }
  const EngineOptions& options() const { return options_; }
  // The longest sequence (options().max_model_len, or the model's max_position_embeddings).
  int64_t max_model_len() const { return max_model_len_; }
  // The tokenizer of DIR/tokenizer.json; null when there was none (or the engine was made over a model).
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }

  // Queues a request. Throws moe::Error for an empty prompt, one longer than max_model_len, an id outside
  // the vocabulary, bad sampling parameters, max_new_tokens < 0, stop strings without a tokenizer, or
  // logprobs outside [-1, kMaxTopLogprobs].
  RequestId submit(Request request);

  // Finishes request `id` now (FinishReason::cancelled) and gives its KV blocks back; nothing for a request
  // that has finished. Throws moe::Error for an unknown id.
  void cancel(RequestId id);

  // Runs one step (see above); idle when nothing is waiting or running.
  StepResult step();

  // Whether any submitted request has not finished yet.
  bool has_unfinished() const;
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  KvUsage kv_usage() const;

  // Request `id` as it stands now. Throws moe::Error for an id submit did not return (or one forgotten).
  const RequestResult& result(RequestId id) const;
  // Drops finished request `id`'s record (a server's memory stays bounded); result(id) throws after.
  void forget(RequestId id);

  // Counts and times since the engine was made.
  const EngineStats& stats() const { return stats_; }

 private:
  struct Tracked {
    Request request;
    RequestResult result{};
    std::optional<SequenceSampler> sampler{};  // made when the request first runs
    std::unique_ptr<TextStream> text{};        // with a tokenizer
    int64_t slot = -1;                         // its KV cache sequence while running
    int64_t cached = 0;                        // its tokens (prompt, then generated) in the KV cache
    int64_t prefill_end = 0;                   // its length when it last joined: tokens before it are prefill
  };

  Engine(std::unique_ptr<model::CausalLM> owned, model::CausalLM& model, std::optional<Tokenizer> tokenizer,
         EngineOptions options);
  Tracked& tracked(RequestId id);
  // The request's tokens: prompt then generated.
  int64_t sequence_length(const Tracked& t) const;
  int32_t sequence_token(const Tracked& t, int64_t pos) const;
  // Blocks sequence `t` needs to hold `count` more tokens.
  int64_t blocks_needed(const Tracked& t, int64_t count) const;
  // Gives running request `id`'s blocks back and queues it at the head, to be recomputed.
  void preempt(RequestId id);
  // Records `token` as request `id`'s next (and a finish) in `out`; `logits` [vocab] are the row it was
  // chosen from, for logprobs (empty when the request wants none).
  void take(RequestId id, int32_t token, std::span<const float> logits, RequestOutput& out);
  // Marks request `id` finished for `reason`; a running one gives its blocks back.
  void finish(RequestId id, FinishReason reason, RequestOutput* out);

  std::unique_ptr<model::CausalLM> owned_;  // set by load(); the engine's model otherwise lives elsewhere
  model::CausalLM* model_;
  std::optional<Tokenizer> tokenizer_;
  EngineOptions options_;
  int64_t max_model_len_ = 0;
  RequestId next_id_ = 0;
  std::map<RequestId, Tracked> requests_;  // submitted and not forgotten
  std::deque<RequestId> waiting_;          // not running: submitted or preempted (at the head)
  std::vector<RequestId> running_;         // in admission order (the newest last)
  std::vector<RequestId> slots_;           // [max_num_seqs] the request in each cache sequence, -1 when free
  std::unique_ptr<model::KvCache> cache_;
  int64_t unfinished_ = 0;                 // submitted requests not yet finished
  EngineStats stats_;
  std::unique_ptr<LoadCounter> counter_;  // counts into stats_.layers
  model::RoutingObserver observer_;       // the counter, then options_.on_routing with request ids
};

}  // namespace moe::engine
