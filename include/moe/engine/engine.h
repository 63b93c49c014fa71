#pragma once
// The Engine: a model directory loaded once (the model and, where DIR/tokenizer.json exists, its
// tokenizer), requests submitted at any time, and step() running one forward at a time over them. Each
// step is either a prefill step (prompt tokens of the current batch, sequence after sequence, up to
// EngineOptions::max_num_batched_tokens; a request's first token comes from the step that holds the end of
// its prompt) or, once every prompt of the batch is in, a decode step (the last token of every running
// request). Results and statistics are readable between steps. One caller at a time: the Engine is not
// thread-safe (the model may run a forward on many threads).
//
// NOTE: the model's KV cache holds a fixed batch of sequences (CausalLM::new_cache), so requests run in
// batches: waiting requests start together (at most max_num_seqs) once the previous batch has finished.

#include <cstdint>
#include <deque>
#include <filesystem>
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

// The CPU experts that suit DIR's checkpoint (ModelOptions::cpu_experts): the fast bf16 experts for BF16
// expert weights, the exact reference experts for F32 and F16 ones (a bf16 pass would throw their
// precision away).
CpuExperts default_cpu_experts(const std::filesystem::path& dir);

// What one step did.
struct StepResult {
  enum class Kind : uint8_t { idle, prefill, decode };
  Kind kind = Kind::idle;                // idle: nothing was waiting or running, no forward ran
  int64_t tokens = 0;                    // tokens run through the model
  std::vector<RequestOutput> outputs{};  // requests that got a token or finished, in request order
};

class Engine {
 public:
  // Loads DIR: the model (CausalLM::load with options.model) and DIR/tokenizer.json if it exists. Throws
  // moe::Error as CausalLM::load and Tokenizer::load do, and for bad options.
  static std::unique_ptr<Engine> load(const std::filesystem::path& dir, EngineOptions options);

  // An engine over a model loaded elsewhere (it must outlive the engine), without a tokenizer.
  // options.model is not used. Throws moe::Error for max_num_batched_tokens or max_num_seqs < 1.
  Engine(model::CausalLM& model, EngineOptions options);

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const model::ModelInfo& info() const { return model_->info(); }
  const EngineOptions& options() const { return options_; }
  // The tokenizer of DIR/tokenizer.json; null when there was none (or the engine was made over a model).
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }

  // Queues a request. Throws moe::Error for an empty prompt, an id outside the vocabulary, bad sampling
  // parameters or max_new_tokens < 0.
  RequestId submit(Request request);

  // Runs one step (see above); idle when nothing is waiting or running.
  StepResult step();

  // Whether any submitted request has not finished yet.
  bool has_unfinished() const;

  // Request `id` as it stands now. Throws moe::Error for an id submit did not return.
  const RequestResult& result(RequestId id) const;

  // Counts and times since the engine was made.
  const EngineStats& stats() const { return stats_; }

 private:
  struct Tracked {
    Request request;
    RequestResult result{};
  };
  // One request of the running batch (its KV cache slot is its index in batch_).
  struct Slot {
    RequestId id;
    SequenceSampler sampler;
  };

  Engine(std::unique_ptr<model::CausalLM> owned, model::CausalLM& model, std::optional<Tokenizer> tokenizer,
         EngineOptions options);
  void start_batch();
  StepResult prefill_step();
  StepResult decode_step();
  // Samples slot `slot`'s next token from its logits [vocab] and records it (and a finish) in `step`.
  void take(size_t slot, std::span<const float> logits, StepResult& step);
  // Marks slot `slot`'s request finished for `reason`.
  void finish(size_t slot, FinishReason reason);
  bool running(size_t slot) const;
  bool batch_done() const;

  std::unique_ptr<model::CausalLM> owned_;  // set by load(); the engine's model otherwise lives elsewhere
  model::CausalLM* model_;
  std::optional<Tokenizer> tokenizer_;
  EngineOptions options_;
  std::vector<Tracked> requests_;        // [submitted], indexed by RequestId
  std::deque<RequestId> waiting_;        // submitted, not yet in a batch, in submission order
  std::vector<Slot> batch_;              // the running batch
  std::unique_ptr<model::KvCache> cache_;  // the batch's
  size_t prefill_slot_ = 0;                // the first slot whose prompt is not all in the cache
  int64_t prefill_offset_ = 0;             // prompt tokens of that slot already in the cache
  int64_t unfinished_ = 0;                 // submitted requests not yet finished
  EngineStats stats_;
  std::unique_ptr<LoadCounter> counter_;  // counts into stats_.layers
  model::RoutingObserver observer_;       // the counter, then options_.on_routing with request ids
};

}  // namespace moe::engine
