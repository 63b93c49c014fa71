#include "moe/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "load_counter.h"
#include "moe/core/check.h"
#include "moe/core/checkpoint.h"
#if MOE_WITH_CUDA
#include "engine/cuda_model.h"
#endif
#include "text_stream.h"

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
  MOE_CHECK(options.max_model_len >= 0, "max_model_len must be >= 1 (or 0 for the model's), got {}",
            options.max_model_len);
  MOE_CHECK(options.kv_cache_blocks >= 0, "kv_cache_blocks must be >= 1 (or 0 for enough), got {}",
            options.kv_cache_blocks);
  MOE_CHECK(options.kv_cache_memory_fraction >= 0.0 && options.kv_cache_memory_fraction <= 1.0,
            "kv_cache_memory_fraction must be in [0, 1], got {}", options.kv_cache_memory_fraction);
  MOE_CHECK(options.kv_memory_bytes >= 0, "kv_memory_bytes must be >= 0 (0: what the model finds), got {}",
            options.kv_memory_bytes);
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
  // NOTE: an exponent of all ones (Inf or NaN) as a bit test, which vectorises where std::isfinite does not:
  // this runs on every step, over [rows, vocab].
  const uint32_t* bits = static_cast<const uint32_t*>(logits.data());
  uint32_t bad = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) bad |= static_cast<uint32_t>((bits[i] & 0x7f800000u) == 0x7f800000u);
  if (bad == 0) return;
  int64_t first = 0;
  while ((bits[first] & 0x7f800000u) != 0x7f800000u) ++first;
  MOE_FAIL("the model's logits are not finite (row {} of the step): a layer overflowed or the weights hold NaN or "
           "Inf (the CPU backend names the layer)", first / logits.size(1));
}

// The cuda backend runs the whole decoder on the GPU, except under expert parallelism (a moe_block function),
// whose blocks take host activations: there only the MoE blocks run on the GPUs.
std::unique_ptr<model::CausalLM> load_model(const fs::path& dir, const model::ModelOptions& options) {
#if MOE_WITH_CUDA
  if (options.backend == model::ModelBackend::cuda && !options.moe_block) return load_cuda_causal_lm(dir, options);
#endif
  return model::CausalLM::load(dir, options);
}

int64_t blocks_for(int64_t tokens, int64_t block_tokens) { return (tokens + block_tokens - 1) / block_tokens; }

// The logits' log-softmax at the sampled token and at the n most likely tokens.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int n) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_norm = max_logit + std::log(sum);
  const auto logprob = [&](int32_t id) { return static_cast<float>(logits[id] - log_norm); };
  TokenLogprob out{.token = token, .logprob = logprob(token)};
  if (n == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto count = std::min<size_t>(n, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < count; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  return out;
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
  max_model_len_ = options_.max_model_len > 0 ? options_.max_model_len : model_->info().max_position_embeddings;
  MOE_CHECK(max_model_len_ >= 1, "the model gives no max_position_embeddings: set max_model_len");
  const int64_t model_len = model_->info().max_position_embeddings;
  MOE_CHECK(model_len <= 0 || max_model_len_ <= model_len,
            "max_model_len {} is more than the model's max_position_embeddings {}: positions past it were never "
            "trained", max_model_len_, model_len);

  // The pool: a one-block cache tells the block's size (and checks max_model_len against the model).
  const std::unique_ptr<model::KvCache> probe = model_->new_paged_cache(1, max_model_len_, 1);
  const int64_t block_tokens = probe->block_tokens();
  const int64_t per_sequence = blocks_for(max_model_len_, block_tokens);
  int64_t blocks = options_.kv_cache_blocks;
  if (blocks == 0) {
    blocks = checked_mul(options_.max_num_seqs, per_sequence, "KV cache blocks");
    const int64_t memory = options_.kv_memory_bytes > 0 ? options_.kv_memory_bytes : model_->kv_memory_available();
    if (options_.kv_cache_memory_fraction > 0.0)
      blocks = std::min(blocks, static_cast<int64_t>(options_.kv_cache_memory_fraction * static_cast<double>(memory) /
                                                     static_cast<double>(probe->block_bytes())));
  }
  MOE_CHECK(blocks >= per_sequence,
            "the KV cache has room for {} blocks of {} tokens, fewer than one sequence of max_model_len {} needs "
            "({}): give it more blocks or memory, or lower max_model_len",
            blocks, block_tokens, max_model_len_, per_sequence);
  cache_ = model_->new_paged_cache(options_.max_num_seqs, max_model_len_, blocks);
  slots_.assign(options_.max_num_seqs, -1);

  counter_ = std::make_unique<LoadCounter>(model_->info(), stats_.layers);
  // NOTE: the model numbers a forward's sequences by KV cache slot; callers see request ids.
  observer_ = [this](const model::RoutingEvent& event) {
    counter_->count(event);
    if (!options_.on_routing) return;
    model::RoutingEvent tagged = event;
    tagged.seq = slots_[event.seq];
    options_.on_routing(tagged);
  };
}

Engine::~Engine() = default;

RequestId Engine::submit(Request request) {
  const RequestId id = next_id_;
  const model::ModelInfo& info = model_->info();
  MOE_CHECK(!request.prompt.empty(), "request {} has no prompt tokens: give at least one token id", id);
  for (int32_t token : request.prompt)
    MOE_CHECK(token >= 0 && token < info.vocab_size, "request {}: token id {} is outside the vocabulary [0, {})", id,
              token, info.vocab_size);
  MOE_CHECK(static_cast<int64_t>(request.prompt.size()) <= max_model_len_,
            "request {}: the prompt has {} tokens, more than max_model_len {}", id, request.prompt.size(),
            max_model_len_);
  check_sampling_params(request.sampling);
  MOE_CHECK(request.max_new_tokens >= 0, "request {}: max_new_tokens must be >= 0, got {}", id,
            request.max_new_tokens);
  for (int32_t token : request.stop_token_ids)
    MOE_CHECK(token >= 0 && token < info.vocab_size, "request {}: stop token id {} is outside the vocabulary [0, {})",
              id, token, info.vocab_size);
  MOE_CHECK(request.logprobs >= -1 && request.logprobs <= kMaxTopLogprobs,
            "request {}: logprobs must be in [0, {}] (or -1 for none), got {}", id, kMaxTopLogprobs,
            request.logprobs);
  MOE_CHECK(request.stop.empty() || tokenizer_,
            "request {}: stop strings need the model's tokenizer (tokenizer.json); give stop token ids instead", id);
  Tracked t{.request = std::move(request)};
  if (tokenizer_) t.text = std::make_unique<TextStream>(*tokenizer_, t.request.stop);
  requests_.emplace(id, std::move(t));
  waiting_.push_back(id);
  ++next_id_;
  ++unfinished_;
  return id;
}

Engine::Tracked& Engine::tracked(RequestId id) {
  const auto it = requests_.find(id);
  MOE_CHECK(it != requests_.end(), "request {} is not known (submit returned ids 0 to {}; finished ones may be "
            "forgotten)", id, next_id_ - 1);
  return it->second;
}

void Engine::cancel(RequestId id) {
  Tracked& t = tracked(id);
  if (t.result.finish != FinishReason::none) return;
  const auto waiting = std::find(waiting_.begin(), waiting_.end(), id);
  if (waiting != waiting_.end()) waiting_.erase(waiting);
  finish(id, FinishReason::cancelled, nullptr);
}

bool Engine::has_unfinished() const { return unfinished_ > 0; }

KvUsage Engine::kv_usage() const {
  return {.block_tokens = cache_->block_tokens(), .total_blocks = cache_->total_blocks(),
          .free_blocks = cache_->free_blocks()};
}

const RequestResult& Engine::result(RequestId id) const {
  return const_cast<Engine*>(this)->tracked(id).result;
}

void Engine::forget(RequestId id) {
  MOE_CHECK(tracked(id).result.finish != FinishReason::none, "request {} is not finished: cancel it first", id);
  requests_.erase(id);
}

int64_t Engine::sequence_length(const Tracked& t) const {
  return static_cast<int64_t>(t.request.prompt.size() + t.result.generated.size());
}

int32_t Engine::sequence_token(const Tracked& t, int64_t pos) const {
  const auto prompt = static_cast<int64_t>(t.request.prompt.size());
  return pos < prompt ? t.request.prompt[pos] : t.result.generated[pos - prompt];
}

int64_t Engine::blocks_needed(const Tracked& t, int64_t count) const {
  const int64_t block_tokens = cache_->block_tokens();
  return blocks_for(t.cached + count, block_tokens) - blocks_for(t.cached, block_tokens);
}

void Engine::preempt(RequestId id) {
  Tracked& t = tracked(id);
  cache_->release(t.slot);
  slots_[t.slot] = -1;
  t.slot = -1;
  t.cached = 0;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  ++t.result.preemptions;
  ++stats_.preemptions;
}

StepResult Engine::step() {
  if (running_.empty() && waiting_.empty()) return {};
  const auto start = Clock::now();
  struct Chunk {
    RequestId id;
    int64_t count;     // tokens of the request run in this step
    int64_t prefill;   // of which before the request's prefill end
  };
  std::vector<Chunk> chunks;
  int64_t budget = options_.max_num_batched_tokens;
  int64_t claimed = 0;  // blocks the chunks so far will take
  bool preempted = false;
  // Makes room for `need` more blocks by preempting the newest running requests (dropping a chunk one of
  // them already had in this step); false when the request `id` itself had to go.
  const auto make_room = [&](RequestId id, int64_t need) {
    while (need > cache_->free_blocks() - claimed) {
      const RequestId victim = running_.back();
      const auto chunk = std::find_if(chunks.begin(), chunks.end(), [&](const Chunk& c) { return c.id == victim; });
      if (chunk != chunks.end()) {
        const Tracked& v = tracked(victim);
        claimed -= blocks_needed(v, chunk->count);
        budget += chunk->count;
        chunks.erase(chunk);
      }
      preempt(victim);
      preempted = true;
      if (victim == id) return false;
    }
    return true;
  };
  const auto schedule = [&](RequestId id, int64_t count) {
    const Tracked& t = tracked(id);
    chunks.push_back({.id = id, .count = count,
                      .prefill = std::clamp<int64_t>(t.prefill_end - t.cached, 0, count)});
    claimed += blocks_needed(t, count);
    budget -= count;
  };

  // The running requests' last tokens first (every one, whatever the budget), then the chunks of those
  // still prefilling, oldest first; out of blocks, the newest running request gives its blocks back.
  for (size_t i = 0; i < running_.size(); ++i) {
    const RequestId id = running_[i];
    if (sequence_length(tracked(id)) - tracked(id).cached != 1) continue;
    if (!make_room(id, blocks_needed(tracked(id), 1))) break;
    schedule(id, 1);
  }
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const RequestId id = running_[i];
    const Tracked& t = tracked(id);
    const int64_t remaining = sequence_length(t) - t.cached;
    if (remaining == 1) continue;
    const int64_t count = std::min(remaining, budget);
    if (!make_room(id, blocks_needed(t, count))) break;
    schedule(id, count);
  }
  // Then waiting requests join, in order, while there is room (not in a step that preempted: the blocks
  // just freed are the preempted request's to take back first).
  while (!preempted && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    const RequestId id = waiting_.front();
    Tracked& t = tracked(id);
    const int64_t length = sequence_length(t);
    const int64_t count = std::min(length, budget);
    const int64_t need = blocks_needed(t, count);
    if (need > cache_->free_blocks() - claimed) break;
    waiting_.pop_front();
    t.slot = std::find(slots_.begin(), slots_.end(), -1) - slots_.begin();
    slots_[t.slot] = id;
    t.prefill_end = length;
    if (!t.sampler) t.sampler.emplace(t.request.sampling, t.request.sample_stream);
    running_.push_back(id);
    schedule(id, count);
  }
  MOE_CHECK(!chunks.empty(), "the scheduler found no work for {} running and {} waiting requests", running_.size(),
            waiting_.size());

  // One forward: each chunk's tokens in its request's KV cache sequence.
  std::vector<std::vector<int32_t>> tokens(slots_.size());  // [slots][new tokens]
  std::vector<int64_t> prompt_lengths(slots_.size(), 0);    // [slots]
  StepResult step;
  for (const Chunk& c : chunks) {
    const Tracked& t = tracked(c.id);
    for (int64_t p = t.cached; p < t.cached + c.count; ++p) tokens[t.slot].push_back(sequence_token(t, p));
    prompt_lengths[t.slot] = static_cast<int64_t>(t.request.prompt.size());
    step.tokens += c.count;
    step.prefill_tokens += c.prefill;
  }
  step.kind = step.prefill_tokens > 0 ? StepResult::Kind::prefill : StepResult::Kind::decode;
  counter_->start_batch(std::move(prompt_lengths));
  std::vector<int64_t> rows(slots_.size(), -1);  // [slots] the slot's row of the forward's output
  int64_t row_count = 0;
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!tokens[s].empty()) rows[s] = row_count++;
  // NOTE: when every token of the step is greedy and no request wants logprobs, the model picks the tokens
  // where its logits are (on the GPU only the ids cross to the host, not [rows, vocab] floats); the same
  // argmax, ties to the lower id, as the host's sampler. Any other step brings the logits here.
  bool greedy_only = true;
  for (const Chunk& c : chunks) {
    const Tracked& t = tracked(c.id);
    if (t.cached + c.count < sequence_length(t)) continue;  // a prompt chunk that ends before the prompt does
    greedy_only = greedy_only && t.request.sampling.temperature == 0.0 && t.request.logprobs < 0;
  }
  Tensor logits;
  std::vector<int32_t> chosen;  // [rows] with greedy_only
  if (greedy_only) {
    chosen = model_->forward_sample(tokens, *cache_, std::vector<model::TokenChoice>(row_count), observer_);
  } else {
    logits = model_->forward(tokens, *cache_, /*last_only=*/true, observer_);
    check_logits(logits, row_count);
  }

  // Every chunk that completed its sequence gives the request its next token, in request order.
  std::sort(chunks.begin(), chunks.end(), [](const Chunk& a, const Chunk& b) { return a.id < b.id; });
  for (const Chunk& c : chunks) {
    Tracked& t = tracked(c.id);
    t.cached += c.count;
    if (t.cached < sequence_length(t)) continue;
    RequestOutput out{.id = c.id};
    const int64_t limit = std::min(t.request.max_new_tokens,
                                   max_model_len_ - static_cast<int64_t>(t.request.prompt.size()));
    if (static_cast<int64_t>(t.result.generated.size()) >= limit)
      finish(c.id, FinishReason::length, &out);
    else if (greedy_only)
      take(c.id, chosen[rows[t.slot]], {}, out);
    else
      take(c.id, t.sampler->next(logits_row(logits, rows[t.slot])), logits_row(logits, rows[t.slot]), out);
    step.outputs.push_back(std::move(out));
  }

  const double seconds = seconds_since(start);
  const double prefill_share = static_cast<double>(step.prefill_tokens) / static_cast<double>(step.tokens);
  stats_.prefill_tokens += step.prefill_tokens;
  stats_.prefill_seconds += seconds * prefill_share;
  stats_.decode_tokens += step.tokens - step.prefill_tokens;
  stats_.decode_seconds += seconds * (1.0 - prefill_share);
  return step;
}

void Engine::take(RequestId id, int32_t token, std::span<const float> logits, RequestOutput& out) {
  Tracked& t = tracked(id);
  t.result.generated.push_back(token);
  out.new_tokens.push_back(token);
  if (t.request.logprobs >= 0) {
    t.result.logprobs.push_back(token_logprob(logits, token, t.request.logprobs));
    out.logprobs.push_back(t.result.logprobs.back());
  }
  const std::vector<int32_t>& eos = model_->info().eos_token_ids;
  const std::vector<int32_t>& stop_ids = t.request.stop_token_ids;
  if ((!t.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) ||
      std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    finish(id, FinishReason::stop, &out);
    return;
  }
  if (t.text && t.text->append(token)) {
    finish(id, FinishReason::stop, &out);
    return;
  }
  const int64_t generated = static_cast<int64_t>(t.result.generated.size());
  if (generated >= t.request.max_new_tokens ||
      static_cast<int64_t>(t.request.prompt.size()) + generated >= max_model_len_) {
    finish(id, FinishReason::length, &out);
    return;
  }
  if (t.text) {
    out.new_text += t.text->take(/*finished=*/false);
    t.result.text = t.text->text();
  }
}

void Engine::finish(RequestId id, FinishReason reason, RequestOutput* out) {
  Tracked& t = tracked(id);
  t.result.finish = reason;
  --unfinished_;
  if (t.text) {
    const std::string rest = t.text->take(/*finished=*/true);
    if (out) out->new_text += rest;
    t.result.text = t.text->text();
  }
  if (out) out->finish = reason;
  if (t.slot >= 0) {
    cache_->release(t.slot);
    slots_[t.slot] = -1;
    t.slot = -1;
    running_.erase(std::find(running_.begin(), running_.end(), id));
  }
}

}  // namespace moe::engine
