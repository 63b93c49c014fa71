#pragma once
// Router maths: scores, top-k selection and weights for every routing method of the supported model
// families. Pure host code on fp32 logits; no device code, no tensors.

#include <cstdint>
#include <span>
#include <string_view>

namespace moe::routing {

enum class RoutingMethod : uint8_t {
  softmax_topk,          // Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek-V2 greedy: p = softmax(l), top-k of p
  group_limited_greedy,  // DeepSeek-V2: top-k of p inside the topk_group groups with the largest max(p)
  noaux_tc,              // DeepSeek-V3: s = sigmoid(l), top-k of s + bias inside the best groups (sum of top-2)
  topk_softmax,          // gpt-oss style: top-k of l, weights = softmax over the k chosen logits
};

std::string_view routing_method_name(RoutingMethod m);

struct RouterConfig {
  RoutingMethod method = RoutingMethod::softmax_topk;
  int n_experts = 0;
  int top_k = 0;
  // Divide the k weights by their sum (noaux_tc adds 1e-20 to the sum, as DeepSeek-V3 does).
  bool norm_topk_prob = false;
  // Multiplies the final weights (after normalisation).
  float routed_scaling_factor = 1.0f;
  // Groups for group_limited_greedy and noaux_tc: n_group equal groups of n_experts / n_group experts, of
  // which the best topk_group are kept.
  int n_group = 1;
  int topk_group = 1;
};

// Throws moe::Error naming the offending key (k > experts, groups that don't divide the experts, too few
// kept groups for k, ...).
void validate(const RouterConfig& config);

// Routes n_tokens tokens.
//   logits          [n_tokens, n_experts] fp32 router logits (x · Wgᵀ)
//   correction_bias [n_experts] for noaux_tc (e_score_correction_bias; empty means zeros), else empty
//   topk_ids        [n_tokens, top_k] out: chosen experts, best first (by the selection score: p for the
//                   softmax methods, s + bias for noaux_tc, l for topk_softmax); ties go to the lower index
//   topk_weights    [n_tokens, top_k] out: the weights to combine the expert outputs with
// Throws moe::Error on a NaN or infinite logit, naming the token and expert.
void route(const RouterConfig& config, std::span<const float> logits, std::span<const float> correction_bias,
           int64_t n_tokens, std::span<int32_t> topk_ids, std::span<float> topk_weights);

}  // namespace moe::routing
