#pragma once
// The router's per-token selection on the device (scores, group masking, top-k, weights), shared by the
// router kernels (router.cu) and the fused decode kernel (decode.cu). Same maths as src/routing/router.cpp
// (the CPU twin): selection on logits (softmax methods), on s + bias (noaux_tc); ties go to the lower
// expert index; dropped groups are masked to -inf. Included by .cu files only.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "moe/routing/router.h"

namespace moe::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

struct ArgMax {
  float value;
  int index;
};

__device__ __forceinline__ ArgMax better(ArgMax a, ArgMax b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// An unsigned key with the order of the floats (for finite values and infinities).
__device__ __forceinline__ unsigned ordered_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The warp's best (largest value, then lowest index). NOTE: two warp-wide reductions (sm_80+) instead of a
// five-step shuffle tree with two shuffles a step: the top-k loop runs this k times per token.
__device__ __forceinline__ ArgMax warp_argmax(ArgMax x) {
  const unsigned key = ordered_key(x.value);
  const unsigned best_key = __reduce_max_sync(kFullMask, key);
  const unsigned index = __reduce_min_sync(kFullMask, key == best_key ? static_cast<unsigned>(x.index) : ~0u);
  const unsigned bits = (best_key & 0x80000000u) ? (best_key & 0x7fffffffu) : ~best_key;  // the key's float
  return {__uint_as_float(bits), static_cast<int>(index)};
}

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

struct RouterParams {
  routing::RoutingMethod method;
  int n_experts, top_k, n_group, topk_group;
  bool norm_topk_prob;
  float routed_scaling_factor;
};

// Scores, group masking and top-k of one token by one warp. `choice` and `score` are this warp's shared
// scratch of E floats each. Lane r < k writes the r-th choice.
__device__ void select_topk(const RouterParams& p, const float* l, const float* __restrict__ bias, float* choice,
                            float* score, int32_t* __restrict__ ids, float* __restrict__ weights) {
  const int lane = threadIdx.x % 32, E = p.n_experts;
  using routing::RoutingMethod;
  float max_logit = -FLT_MAX;
  for (int e = lane; e < E; e += 32) max_logit = fmaxf(max_logit, l[e]);
  max_logit = warp_max(max_logit);
  float sum = 0.0f;
  for (int e = lane; e < E; e += 32) {
    const float v = l[e];
    if (p.method == RoutingMethod::noaux_tc) {
      const float s = 1.0f / (1.0f + expf(-v));
      score[e] = s;
      choice[e] = s + (bias ? bias[e] : 0.0f);
    } else {
      score[e] = p.method == RoutingMethod::topk_softmax ? v : expf(v - max_logit);
      choice[e] = v;  // softmax is monotone: select on the logits
      sum += score[e];
    }
  }
  sum = warp_sum(sum);
  __syncwarp();

  const bool grouped = p.method == RoutingMethod::group_limited_greedy || p.method == RoutingMethod::noaux_tc;
  if (grouped && p.topk_group < p.n_group) {
    const int group_size = E / p.n_group;
    float group_score = -FLT_MAX;
    if (lane < p.n_group) {
      float first = -FLT_MAX, second = -FLT_MAX;
      for (int i = 0; i < group_size; ++i) {
        const float v = choice[lane * group_size + i];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      group_score = p.method == RoutingMethod::noaux_tc ? first + second : first;
    }
    unsigned kept = 0;
    for (int r = 0; r < p.topk_group; ++r) {
      const bool candidate = lane < p.n_group && !((kept >> lane) & 1u);
      const ArgMax best = warp_argmax({candidate ? group_score : -FLT_MAX, candidate ? lane : 1 << 30});
      kept |= 1u << best.index;
    }
    // NOTE: the group lanes read every lane's `choice` above; the shuffles between order no memory, so the
    // warp syncs before the masking overwrites it (compute-sanitizer racecheck flagged the hazard).
    __syncwarp();
    for (int e = lane; e < E; e += 32)
      if (!((kept >> (e / group_size)) & 1u)) choice[e] = -INFINITY;
    __syncwarp();
  }

  int my_id = 0;
  float my_weight = 0.0f, chosen_sum = 0.0f, best_logit = 0.0f;
  for (int r = 0; r < p.top_k; ++r) {
    ArgMax local{-INFINITY, 1 << 30};
    for (int e = lane; e < E; e += 32) local = better(local, {choice[e], e});
    const ArgMax best = warp_argmax(local);
    __syncwarp();
    if (lane == 0) choice[best.index] = -INFINITY;
    __syncwarp();
    float w = score[best.index];
    if (p.method == RoutingMethod::topk_softmax) {
      if (r == 0) best_logit = w;
      w = expf(w - best_logit);
    } else if (p.method != RoutingMethod::noaux_tc) {
      w /= sum;
    }
    chosen_sum += w;
    if (lane == r) {
      my_id = best.index;
      my_weight = w;
    }
  }
  if (lane < p.top_k) {
    float w = my_weight;
    if (p.method == RoutingMethod::topk_softmax) w /= chosen_sum;
    else if (p.method == RoutingMethod::noaux_tc && p.norm_topk_prob) w /= chosen_sum + 1e-20f;
    else if (p.norm_topk_prob) w /= chosen_sum;
    ids[lane] = my_id;
    weights[lane] = w * p.routed_scaling_factor;
  }
}

}  // namespace
}  // namespace moe::cuda
