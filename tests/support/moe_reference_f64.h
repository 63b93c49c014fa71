#pragma once
// An independent float64 oracle for one HuggingFace MoE block (mixtral, qwen2_moe, qwen3_moe, olmoe,
// deepseek_v2, deepseek_v3), written from shared/DESIGN.md "The MoE layer, exactly" and transformers 5.x,
// and deliberately sharing no code with src/routing or src/layer. Plain loops, everything in double.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moe/core/tensor.h"

namespace moe::test {

// The padded (capacity) paradigm: C = ceil(capacity_factor * T * k / E) rows per expert, pairs kept
// first-come in token order; `renormalize` rescales a token's kept weights to its original weight sum,
// otherwise (drop) a dropped pair contributes nothing.
struct PaddedOptions {
  double capacity_factor = 1.0;
  bool renormalize = false;
};

// The block's parameters as the reference reads them from config.json (defaults applied).
struct ReferenceConfig {
  std::string model_type;
  int64_t hidden = 0;               // H
  int64_t experts = 0;              // E
  int64_t top_k = 0;                // k
  int64_t intermediate = 0;         // I of one routed expert
  int64_t shared_intermediate = 0;  // 0: no shared expert
  bool norm_topk_prob = false;      // as applied (mixtral: true, deepseek_v2: false whatever the config says)
  double routed_scaling_factor = 1.0;
  std::string scoring;  // "softmax", "group_limited_greedy" (deepseek_v2), "noaux_tc" (deepseek_v3)
  int64_t n_group = 1;
  int64_t topk_group = 1;
};

// Reads and validates the block parameters of a config.json; throws moe::Error on a bad config.
ReferenceConfig reference_config(const nlohmann::json& hf_config);

struct ReferenceResult {
  int64_t tokens = 0;           // T
  int64_t hidden = 0;           // H
  int64_t top_k = 0;            // k
  int64_t experts = 0;          // E
  std::vector<double> out;      // [T * H] block output (routed + shared)
  std::vector<int32_t> ids;     // [T * k] chosen experts, selection score descending, ties to lower index
  std::vector<double> weights;  // [T * k] the router's weights for `ids` (before any dropping)
  std::vector<double> scores;   // [T * k] the selection score of each chosen expert (p, or s + bias)
  // Smallest gap, per token, between the scores that decide the result: adjacent scores among the best
  // k + 1 allowed experts, and the group scores either side of the last kept group. Measured on logits for
  // softmax routing (they rank like p, and are what fp32 rounds) and on s + bias for deepseek_v3. A tool
  // computing in fp32 may legitimately choose differently where this is below ~1e-5.
  std::vector<double> selection_margin;     // [T]
  std::vector<int64_t> tokens_per_expert;   // [E] routed (token, expert) pairs, before dropping; sums to T*k
  std::vector<int64_t> dropped_per_expert;  // [E] pairs beyond capacity (padded paradigm; else zeros)
  int64_t dropped_pairs = 0;                // sum of dropped_per_expert
  int64_t capacity = 0;                     // C (padded paradigm; else 0)
};

// Runs the block on x [T, H] (any float dtype). `weight(name)` returns a tensor for a name relative to the
// block ("gate.weight", "experts.3.up_proj.weight", "experts.3.w3.weight" for mixtral, ...); it is called
// at most once per name. `padded` selects the padded paradigm; null means contiguous (nothing dropped).
ReferenceResult moe_reference_f64(const nlohmann::json& hf_config,
                                  const std::function<Tensor(const std::string&)>& weight, const Tensor& x,
                                  const PaddedOptions* padded = nullptr);

}  // namespace moe::test
