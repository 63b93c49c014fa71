#include "generate_report.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "moe/routing/load_stats.h"

namespace moe::cli {

namespace {

// Prompt and generated counts of one layer together.
std::vector<int64_t> all_counts(const engine::LayerLoad& load) {
  std::vector<int64_t> counts = load.prompt_counts;
  for (size_t e = 0; e < counts.size(); ++e) counts[e] += load.generated_counts[e];
  return counts;
}

routing::LoadStats layer_stats(std::span<const int64_t> counts, int64_t tokens, int top_k) {
  return routing::load_stats_from_counts(counts, tokens, top_k);
}

}  // namespace

nlohmann::ordered_json trace_line(const model::RoutingEvent& event) {
  nlohmann::ordered_json j;
  j["seq"] = event.seq;
  j["pos"] = event.pos;
  j["token"] = event.token;
  j["layer"] = event.layer;
  j["experts"] = event.experts;
  j["weights"] = event.weights;
  return j;
}

nlohmann::ordered_json result_json(const std::vector<std::vector<int32_t>>& prompts,
                                   const engine::GenerationResult& result, const std::vector<std::string>& texts) {
  nlohmann::ordered_json j;
  const auto text = [&](size_t s) { return texts.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(texts[s]); };
  if (prompts.size() == 1) {
    j["prompt_ids"] = prompts[0];
    j["generated_ids"] = result.generated[0];
    j["text"] = text(0);
  } else {
    j["prompt_ids"] = prompts;
    j["generated_ids"] = result.generated;
    j["text"] = nlohmann::ordered_json::array();
    for (size_t s = 0; s < prompts.size(); ++s) j["text"].push_back(text(s));
  }
  j["prefill_tokens_per_s"] = result.prefill_tokens_per_s();
  j["decode_tokens_per_s"] = result.decode_tokens_per_s();
  return j;
}

nlohmann::ordered_json stats_json(const model::ModelInfo& info, const engine::GenerationResult& result) {
  nlohmann::ordered_json j;
  j["model_type"] = info.model_type;
  j["n_experts"] = info.num_experts;
  j["top_k"] = info.top_k;
  j["prompt_tokens"] = result.prefill_tokens;
  j["generated_tokens"] = result.decode_tokens;  // generated tokens run through the model
  j["layers"] = nlohmann::ordered_json::object();
  j["prompt"] = nlohmann::ordered_json::object();
  j["generated"] = nlohmann::ordered_json::object();
  std::vector<int64_t> total(info.num_experts, 0);
  int64_t total_tokens = 0;
  for (const engine::LayerLoad& load : result.layers) {
    const std::string key = std::to_string(load.layer);
    const auto counts = all_counts(load);
    const int64_t tokens = load.prompt_tokens + load.generated_tokens;
    j["layers"][key] = routing::to_json(layer_stats(counts, tokens, info.top_k));
    j["prompt"][key] = routing::to_json(layer_stats(load.prompt_counts, load.prompt_tokens, info.top_k));
    j["generated"][key] = routing::to_json(layer_stats(load.generated_counts, load.generated_tokens, info.top_k));
    for (size_t e = 0; e < counts.size(); ++e) total[e] += counts[e];
    total_tokens += tokens;
  }
  // NOTE: over all layers n_tokens counts (token, MoE layer) pairs.
  j["totals"] = routing::to_json(layer_stats(total, total_tokens, info.top_k));
  return j;
}

std::vector<std::string> load_summary(const model::ModelInfo& info, const engine::GenerationResult& result) {
  std::vector<std::string> lines;
  for (const engine::LayerLoad& load : result.layers) {
    const auto counts = all_counts(load);
    const int64_t tokens = load.prompt_tokens + load.generated_tokens;
    const int k = info.top_k;
    if (tokens == 0) {
      lines.push_back(fmt::format("layer {}: no tokens", load.layer));
      continue;
    }
    const routing::LoadStats s = layer_stats(counts, tokens, k);
    const double pairs = static_cast<double>(tokens) * k;
    std::vector<int32_t> order(counts.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
    std::vector<std::string> hottest;
    for (size_t i = 0; i < std::min<size_t>(3, order.size()) && counts[order[i]] > 0; ++i)
      hottest.push_back(fmt::format("{} ({:.1f}%)", order[i], 100.0 * counts[order[i]] / pairs));
    std::string dead = "none";
    if (!s.dead_experts.empty()) {
      constexpr size_t kShown = 12;
      const auto shown = std::span(s.dead_experts).first(std::min(kShown, s.dead_experts.size()));
      dead = fmt::format("{}", fmt::join(shown, ", "));
      if (s.dead_experts.size() > kShown) dead = fmt::format("{} experts ({}, ...)", s.dead_experts.size(), dead);
    }
    lines.push_back(fmt::format("layer {}: imbalance {:.2f}, hottest {}; dead: {}", load.layer,
                                s.max_over_mean, fmt::join(hottest, ", "), dead));
  }
  return lines;
}

}  // namespace moe::cli
