#pragma once
// The server's Prometheus metrics (GET /metrics, text format 0.0.4), named moe:* as vLLM names its vllm:*:
//   moe:requests_total{status}                 API responses by HTTP status (the /v1/ endpoints)
//   moe:request_success_total{finished_reason} finished requests: stop, length, abort (cancelled or dropped)
//   moe:prompt_tokens_total, moe:generation_tokens_total   tokens of the finished requests
//   moe:num_requests_running, moe:num_requests_waiting     the engine's sequences now
//   moe:kv_cache_used_blocks, moe:kv_cache_free_blocks, moe:kv_cache_block_tokens
//   moe:num_preemptions_total                  running requests that lost their KV blocks (recomputed)
//   moe:time_to_first_token_seconds, moe:inter_token_latency_seconds   histograms
//   moe:expert_routed_pairs_total{layer,expert}  (token, expert) pairs routed, prompt and generated tokens
//   moe:expert_imbalance{layer}                  the busiest expert's pairs over the mean (1: even)
// Thread-safe: the scheduler thread and the HTTP threads record, any thread renders.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "moe/engine/engine.h"

namespace moe::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // bucket upper bounds, increasing
  void observe(double value);
  // The histogram's lines for metric `name`.
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // [bounds + 1] per bucket (not cumulative); the last is +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

// What the engine holds now (the scheduler sets it after every step).
struct EngineGauges {
  int64_t running = 0, waiting = 0;
  engine::KvUsage kv;
  int64_t preemptions = 0;
  std::vector<engine::LayerLoad> layers;
};

class Metrics {
 public:
  Metrics();
  void count_response(int status);
  void count_finished(engine::FinishReason reason, int64_t prompt_tokens, int64_t generated_tokens);
  void observe_first_token(double seconds);
  void observe_inter_token(double seconds);
  void set_engine(EngineGauges gauges);
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<int, int64_t> responses_;         // HTTP status -> count
  std::map<std::string, int64_t> finished_;  // finish reason name -> count
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram first_token_, inter_token_;
  EngineGauges engine_;
};

}  // namespace moe::server
