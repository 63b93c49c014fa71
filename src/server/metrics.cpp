#include "metrics.h"

#include <fmt/core.h>

#include <algorithm>

#include "moe/core/check.h"

namespace moe::server {

namespace {

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, const std::string& name, double value) {
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  MOE_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds must increase");
}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name) const {
  std::string out;
  int64_t cumulative = 0;
  for (size_t b = 0; b < bounds_.size(); ++b) {
    cumulative += counts_[b];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[b], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name,
                     count_);
  return out;
}

// NOTE: vLLM's buckets for the same histograms, so that dashboards built for it read these.
Metrics::Metrics()
    : first_token_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      inter_token_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                    20.0, 40.0, 80.0}) {}

void Metrics::count_response(int status) {
  std::lock_guard lock(mutex_);
  ++responses_[status];
}

void Metrics::count_finished(engine::FinishReason reason, int64_t prompt_tokens, int64_t generated_tokens) {
  std::lock_guard lock(mutex_);
  ++finished_[engine::finish_reason_name(reason)];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generated_tokens;
}

void Metrics::observe_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  first_token_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(seconds);
}

void Metrics::set_engine(EngineGauges gauges) {
  std::lock_guard lock(mutex_);
  engine_ = std::move(gauges);
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "moe:requests_total", "counter", "API responses by HTTP status.");
  for (const auto& [status, count] : responses_)
    out += fmt::format("moe:requests_total{{status=\"{}\"}} {}\n", status, count);
  header(out, "moe:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = finished_.find(reason);
    out += fmt::format("moe:request_success_total{{finished_reason=\"{}\"}} {}\n", reason,
                       it == finished_.end() ? 0 : it->second);
  }
  header(out, "moe:prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  sample(out, "moe:prompt_tokens_total", static_cast<double>(prompt_tokens_));
  header(out, "moe:generation_tokens_total", "counter", "Generated tokens of finished requests.");
  sample(out, "moe:generation_tokens_total", static_cast<double>(generation_tokens_));
  header(out, "moe:num_requests_running", "gauge", "Requests holding a sequence of the KV cache.");
  sample(out, "moe:num_requests_running", static_cast<double>(engine_.running));
  header(out, "moe:num_requests_waiting", "gauge", "Requests waiting for a sequence (new or preempted).");
  sample(out, "moe:num_requests_waiting", static_cast<double>(engine_.waiting));
  header(out, "moe:kv_cache_used_blocks", "gauge", "KV cache blocks held by sequences.");
  sample(out, "moe:kv_cache_used_blocks",
         static_cast<double>(engine_.kv.total_blocks - engine_.kv.free_blocks));
  header(out, "moe:kv_cache_free_blocks", "gauge", "KV cache blocks free.");
  sample(out, "moe:kv_cache_free_blocks", static_cast<double>(engine_.kv.free_blocks));
  header(out, "moe:kv_cache_block_tokens", "gauge", "Tokens per KV cache block.");
  sample(out, "moe:kv_cache_block_tokens", static_cast<double>(engine_.kv.block_tokens));
  header(out, "moe:num_preemptions_total", "counter", "Running requests preempted for KV blocks.");
  sample(out, "moe:num_preemptions_total", static_cast<double>(engine_.preemptions));
  header(out, "moe:time_to_first_token_seconds", "histogram",
         "From the request's arrival to its first token.");
  out += first_token_.render("moe:time_to_first_token_seconds");
  header(out, "moe:inter_token_latency_seconds", "histogram", "Between a request's consecutive tokens.");
  out += inter_token_.render("moe:inter_token_latency_seconds");
  header(out, "moe:expert_routed_pairs_total", "counter",
         "(token, expert) pairs routed per MoE layer and expert.");
  std::string imbalance;
  for (const engine::LayerLoad& load : engine_.layers) {
    int64_t total = 0, busiest = 0;
    for (size_t e = 0; e < load.prompt_counts.size(); ++e) {
      const int64_t pairs = load.prompt_counts[e] + load.generated_counts[e];
      out += fmt::format("moe:expert_routed_pairs_total{{layer=\"{}\",expert=\"{}\"}} {}\n", load.layer, e,
                         pairs);
      total += pairs;
      busiest = std::max(busiest, pairs);
    }
    const double mean =
        load.prompt_counts.empty() ? 0.0 : static_cast<double>(total) / load.prompt_counts.size();
    imbalance +=
        fmt::format("moe:expert_imbalance{{layer=\"{}\"}} {}\n", load.layer, mean > 0 ? busiest / mean : 0.0);
  }
  header(out, "moe:expert_imbalance", "gauge",
         "The busiest expert's routed pairs over the mean, per MoE layer.");
  out += imbalance;
  return out;
}

}  // namespace moe::server
