#include "moe/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "load_counter.h"
#include "moe/core/check.h"
#include "moe/core/checkpoint.h"
#if MOE_WITH_CUDA
#include "moe/engine/cuda_model.h"
#endif

namespace moe::engine {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_options(const EngineOptions& options) {
  MOE_CHECK(options.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1, got {}",
            options.max_num_batched_tokens);
  MOE_CHECK(options.max_num_seqs >= 1, "max_num_seqs must be >= 1, got {}", options.max_num_seqs);
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

// The cuda backend runs the whole decoder on the GPU, except under expert parallelism (a moe_block function),
// whose blocks take host activations: there only the MoE blocks run on the GPUs.
std::unique_ptr<model::CausalLM> load_model(const fs::path& dir, const model::ModelOptions& options) {
#if MOE_WITH_CUDA
  if (options.backend == model::ModelBackend::cuda && !options.moe_block) return load_cuda_causal_lm(dir, options);
#endif
  return model::CausalLM::load(dir, options);
}

}  // namespace

CpuExperts default_cpu_experts(const fs::path& dir) {
  const Checkpoint checkpoint = Checkpoint::open(dir);
  for (const std::string& name : checkpoint.names())
    if (name.find(".experts.") != std::string::npos)
      return checkpoint.get(name).dtype() == DType::BF16 ? CpuExperts::fast : CpuExperts::reference;
  return CpuExperts::reference;
}

std::unique_ptr<Engine> Engine::load(const fs::path& dir, EngineOptions options) {
  check_options(options);
  options.model.max_batched_tokens = moe_workspace_tokens(options);
  std::optional<Tokenizer> tokenizer;
  const fs::path tokenizer_file = dir / "tokenizer.json";
  if (options.load_tokenizer && fs::exists(tokenizer_file)) tokenizer = Tokenizer::load(tokenizer_file);
  std::unique_ptr<model::CausalLM> model = load_model(dir, options.model);
  model::CausalLM& ref = *model;
  return std::unique_ptr<Engine>(new Engine(std::move(model), ref, std::move(tokenizer), std::move(options)));
}

Engine::Engine(model::CausalLM& model, EngineOptions options)
    : Engine(nullptr, model, std::nullopt, std::move(options)) {}

Engine::Engine(std::unique_ptr<model::CausalLM> owned, model::CausalLM& model, std::optional<Tokenizer> tokenizer,
               EngineOptions options)
    : owned_(std::move(owned)), model_(&model), tokenizer_(std::move(tokenizer)), options_(std::move(options)) {
  check_options(options_);
  counter_ = std::make_unique<LoadCounter>(model_->info(), stats_.layers);
  // NOTE: the model numbers a forward's sequences by KV cache slot; callers see request ids.
  observer_ = [this](const model::RoutingEvent& event) {
    counter_->count(event);
    if (!options_.on_routing) return;
    model::RoutingEvent tagged = event;
    tagged.seq = batch_[event.seq].id;
    options_.on_routing(tagged);
  };
}

Engine::~Engine() = default;

RequestId Engine::submit(Request request) {
  const auto id = static_cast<RequestId>(requests_.size());
  const model::ModelInfo& info = model_->info();
  MOE_CHECK(!request.prompt.empty(), "request {} has no prompt tokens: give at least one token id", id);
  for (int32_t token : request.prompt)
    MOE_CHECK(token >= 0 && token < info.vocab_size, "request {}: token id {} is outside the vocabulary [0, {})", id,
              token, info.vocab_size);
  check_sampling_params(request.sampling);
  MOE_CHECK(request.max_new_tokens >= 0, "request {}: max_new_tokens must be >= 0, got {}", id,
            request.max_new_tokens);
  requests_.push_back({.request = std::move(request)});
  waiting_.push_back(id);
  ++unfinished_;
  return id;
}

bool Engine::has_unfinished() const { return unfinished_ > 0; }

const RequestResult& Engine::result(RequestId id) const {
  MOE_CHECK(id >= 0 && id < static_cast<RequestId>(requests_.size()), "request {} was never submitted ({} were)", id,
            requests_.size());
  return requests_[id].result;
}

bool Engine::running(size_t slot) const { return requests_[batch_[slot].id].result.finish == FinishReason::none; }

bool Engine::batch_done() const {
  if (prefill_slot_ < batch_.size()) return false;
  for (size_t slot = 0; slot < batch_.size(); ++slot)
    if (running(slot)) return false;
  return true;
}

void Engine::start_batch() {
  batch_.clear();
  std::vector<int64_t> prompt_lengths;
  int64_t max_length = 0;
  while (!waiting_.empty() && static_cast<int64_t>(batch_.size()) < options_.max_num_seqs) {
    const RequestId id = waiting_.front();
    waiting_.pop_front();
    const Request& request = requests_[id].request;
    batch_.push_back({.id = id, .sampler = SequenceSampler(request.sampling, request.sample_stream)});
    prompt_lengths.push_back(static_cast<int64_t>(request.prompt.size()));
    max_length = std::max(max_length, prompt_lengths.back() + request.max_new_tokens);
  }
  cache_ = model_->new_cache(static_cast<int64_t>(batch_.size()), max_length);
  counter_->start_batch(std::move(prompt_lengths));
  prefill_slot_ = 0;
  prefill_offset_ = 0;
}

StepResult Engine::step() {
  if (batch_done()) {
    if (waiting_.empty()) return {};
    start_batch();
  }
  return prefill_slot_ < batch_.size() ? prefill_step() : decode_step();
}

StepResult Engine::prefill_step() {
  // Fill the forward with up to max_num_batched_tokens prompt tokens, sequence after sequence.
  const auto start = Clock::now();
  StepResult step{.kind = StepResult::Kind::prefill};
  std::vector<std::vector<int32_t>> tokens(batch_.size());  // [slots][new tokens]
  std::vector<std::pair<size_t, bool>> rows;                // (slot, its prompt ends here), in slot order
  int64_t room = options_.max_num_batched_tokens;
  while (room > 0 && prefill_slot_ < batch_.size()) {
    const std::vector<int32_t>& prompt = requests_[batch_[prefill_slot_].id].request.prompt;
    const auto length = static_cast<int64_t>(prompt.size());
    const int64_t count = std::min(room, length - prefill_offset_);
    tokens[prefill_slot_].assign(prompt.begin() + prefill_offset_, prompt.begin() + prefill_offset_ + count);
    prefill_offset_ += count;
    room -= count;
    step.tokens += count;
    rows.emplace_back(prefill_slot_, prefill_offset_ == length);
    if (prefill_offset_ == length) {
      ++prefill_slot_;
      prefill_offset_ = 0;
    }
  }
  const Tensor logits = model_->forward(tokens, *cache_, /*last_only=*/true, observer_);
  check_logits(logits, static_cast<int64_t>(rows.size()));
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto [slot, prompt_done] = rows[r];
    if (!prompt_done) continue;
    if (requests_[batch_[slot].id].request.max_new_tokens > 0) {
      take(slot, logits_row(logits, static_cast<int64_t>(r)), step);
    } else {
      finish(slot, FinishReason::length);
      step.outputs.push_back({.id = batch_[slot].id, .finish = FinishReason::length});
    }
  }
  stats_.prefill_tokens += step.tokens;
  stats_.prefill_seconds += seconds_since(start);
  return step;
}

StepResult Engine::decode_step() {
  // The last token of every running request, in one forward.
  const auto start = Clock::now();
  StepResult step{.kind = StepResult::Kind::decode};
  std::vector<std::vector<int32_t>> tokens(batch_.size());  // [slots][0 or 1 token]
  std::vector<size_t> rows;                                 // running slots, in slot order
  for (size_t slot = 0; slot < batch_.size(); ++slot) {
    if (!running(slot)) continue;
    tokens[slot].push_back(requests_[batch_[slot].id].result.generated.back());
    rows.push_back(slot);
  }
  const Tensor logits = model_->forward(tokens, *cache_, /*last_only=*/true, observer_);
  check_logits(logits, static_cast<int64_t>(rows.size()));
  for (size_t r = 0; r < rows.size(); ++r) take(rows[r], logits_row(logits, static_cast<int64_t>(r)), step);
  step.tokens = static_cast<int64_t>(rows.size());
  stats_.decode_tokens += step.tokens;
  stats_.decode_seconds += seconds_since(start);
  return step;
}

void Engine::take(size_t slot, std::span<const float> logits, StepResult& step) {
  Tracked& tracked = requests_[batch_[slot].id];
  const int32_t token = batch_[slot].sampler.next(logits);
  tracked.result.generated.push_back(token);
  const std::vector<int32_t>& eos = model_->info().eos_token_ids;
  if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
    finish(slot, FinishReason::stop);
  } else if (static_cast<int64_t>(tracked.result.generated.size()) >= tracked.request.max_new_tokens) {
    finish(slot, FinishReason::length);
  }
  step.outputs.push_back({.id = batch_[slot].id, .new_tokens = {token}, .finish = tracked.result.finish});
}

void Engine::finish(size_t slot, FinishReason reason) {
  requests_[batch_[slot].id].result.finish = reason;
  --unfinished_;
}

}  // namespace moe::engine
