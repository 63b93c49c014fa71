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
  // NOTE: -0 and +0 are equal floats, so they get one key (else +0 would beat a lower expert's -0).
  const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The float of an ordered_key.
__device__ __forceinline__ float key_float(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The warp's best (largest value, then lowest index). NOTE: two warp-wide reductions (sm_80+) instead of a
// five-step shuffle tree with two shuffles a step: the top-k loop runs this k times per token.
__device__ __forceinline__ ArgMax warp_argmax(ArgMax x) {
  const unsigned key = ordered_key(x.value);
  const unsigned best_key = __reduce_max_sync(kFullMask, key);
  const unsigned index = __reduce_min_sync(kFullMask, key == best_key ? static_cast<unsigned>(x.index) : ~0u);
  return {key_float(best_key), static_cast<int>(index)};
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

// noaux_tc's score as the CPU twin computes it: the sigmoid in double, rounded once to float. NOTE: an fp32
// 1 / (1 + expf(-v)) can be an ulp off, and s + bias then breaks a near-tie the other way than the CPU.
__device__ __forceinline__ float sigmoid_as_reference(float v) {
  return static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(v))));
}

// Expert e's value to select on and its weight source, from its logit v: noaux_tc the sigmoid (plus the
// correction bias to select), topk_softmax the logit, the softmax methods the logit to select (softmax is
// monotone) and exp(v - max_logit) to weigh. Experts past E (padding) weigh 0.
struct ExpertScore {
  float choice, score;
};
__device__ __forceinline__ ExpertScore score_expert(const RouterParams& p, float v, int e,
                                                    const float* __restrict__ bias, float max_logit) {
  using routing::RoutingMethod;
  const bool valid = e < p.n_experts;
  if (p.method == RoutingMethod::noaux_tc) {
    const float s = sigmoid_as_reference(v);
    return {s + (bias && valid ? bias[e] : 0.0f), s};
  }
  if (p.method == RoutingMethod::topk_softmax) return {v, v};
  return {v, valid ? expf(v - max_logit) : 0.0f};
}

// Whether the grouped methods' masking keeps expert e (`kept` from kept_groups).
__device__ __forceinline__ bool in_kept_group(const RouterParams& p, unsigned kept, int e) {
  return (kept >> (e / (p.n_experts / p.n_group))) & 1u;
}

// The groups the grouped methods (group_limited_greedy, noaux_tc) keep: bit g set for the topk_group groups
// with the best group score (max, or sum of the top 2 for noaux_tc; ties to the lower group). `choice` is
// the warp's shared scratch of E floats, holding the selection values.
__device__ unsigned kept_groups(const RouterParams& p, const float* choice) {
  const int lane = threadIdx.x % 32, group_size = p.n_experts / p.n_group;
  float group_score = -FLT_MAX;
  if (lane < p.n_group) {
    // NOTE: each lane starts at its own offset into its group, so that the lanes' reads fall in different
    // banks (groups of 32 put every lane's first element in one bank); the top 2 do not depend on the order.
    float first = -FLT_MAX, second = -FLT_MAX;
    const float* group = choice + lane * group_size;
    const int offset = lane % group_size;
#pragma unroll 8
    for (int i = 0; i < group_size; ++i) {
      const int at = i + offset < group_size ? i + offset : i + offset - group_size;
      const float v = group[at];
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score = p.method == routing::RoutingMethod::noaux_tc ? first + second : first;
  }
  unsigned kept = 0;
  for (int r = 0; r < p.topk_group; ++r) {
    const bool candidate = lane < p.n_group && !((kept >> lane) & 1u);
    const ArgMax best = warp_argmax({candidate ? group_score : -FLT_MAX, candidate ? lane : 1 << 30});
    kept |= 1u << best.index;
  }
  return kept;
}

// Lane r < k: the r-th choice's weight from its score (see select_topk), then ids[r] and weights[r].
// `score` is the chosen expert's score (softmax numerator, logit for topk_softmax, sigmoid for noaux_tc).
__device__ __forceinline__ void write_choice(const RouterParams& p, int id, float score, float softmax_sum,
                                             int32_t* __restrict__ ids, float* __restrict__ weights) {
  using routing::RoutingMethod;
  const int lane = threadIdx.x % 32;
  const bool mine = lane < p.top_k;
  float w = 0.0f;
  if (p.method == RoutingMethod::topk_softmax) {
    const float best_logit = __shfl_sync(kFullMask, score, 0);
    w = mine ? expf(score - best_logit) : 0.0f;
    w /= warp_sum(w);
  } else if (p.method == RoutingMethod::noaux_tc) {
    w = mine ? score : 0.0f;
    if (p.norm_topk_prob) w /= warp_sum(w) + 1e-20f;
  } else {
    w = mine ? score / softmax_sum : 0.0f;
    if (p.norm_topk_prob) w /= warp_sum(w);
  }
  if (mine) {
    ids[lane] = id;
    weights[lane] = w * p.routed_scaling_factor;
  }
}

// One warp, one token, E <= 32 * C: every lane holds experts lane, lane + 32, ... in registers, sorted best
// first, and each of the k rounds takes the best head over the warp (one reduction; a second only on a
// tie) and pops it from its lane. NOTE: the rounds are a chain of dependent steps; scanning shared memory
// for the best in every round (select_topk_scan) made them ~500 cycles each, 2.1 of the 3.5 us that
// Qwen3's selection took in the fused decode kernel (H200, 2026-11-30).
template <int C>
__device__ void select_topk_in_registers(const RouterParams& p, const float* l,
                                         const float* __restrict__ bias, float* choice,
                                         int32_t* __restrict__ ids, float* __restrict__ weights) {
  using routing::RoutingMethod;
  const int lane = threadIdx.x % 32, E = p.n_experts;
  float v[C];
#pragma unroll
  for (int j = 0; j < C; ++j) v[j] = lane + 32 * j < E ? l[lane + 32 * j] : -FLT_MAX;
  // Selection value c and weight source s of every expert of this lane.
  const bool softmax = p.method != RoutingMethod::noaux_tc && p.method != RoutingMethod::topk_softmax;
  float max_logit = -FLT_MAX;
  if (softmax) {
#pragma unroll
    for (int j = 0; j < C; ++j) max_logit = fmaxf(max_logit, v[j]);
    // NOTE: one reduction on the ordered keys (exact) instead of five shuffle steps.
    max_logit = key_float(__reduce_max_sync(kFullMask, ordered_key(max_logit)));
  }
  float c[C], s[C], softmax_sum = 0.0f;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const ExpertScore x = score_expert(p, v[j], lane + 32 * j, bias, max_logit);
    c[j] = x.choice;
    s[j] = x.score;
    if (softmax) softmax_sum += x.score;
  }
  if (softmax) softmax_sum = warp_sum(softmax_sum);
  const bool grouped = p.method == RoutingMethod::group_limited_greedy || p.method == RoutingMethod::noaux_tc;
  if (grouped && p.topk_group < p.n_group) {
#pragma unroll
    for (int j = 0; j < C; ++j)
      if (lane + 32 * j < E) choice[lane + 32 * j] = c[j];
    __syncwarp();
    const unsigned kept = kept_groups(p, choice);
    // NOTE: the group lanes read every lane's `choice`; the warp syncs before anyone writes it again.
    __syncwarp();
#pragma unroll
    for (int j = 0; j < C; ++j)
      if (lane + 32 * j < E && !in_kept_group(p, kept, lane + 32 * j)) c[j] = -INFINITY;
  }
  // Keys in the floats' order; 0 (below every float's) past E. Then this lane's list sorted best first:
  // larger key, or the same key and the lower expert (insertion sort, unrolled: registers only).
  unsigned key[C];
  int id[C];
  float score[C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    key[j] = lane + 32 * j < E ? ordered_key(c[j]) : 0u;
    id[j] = lane + 32 * j;
    score[j] = s[j];
  }
#pragma unroll
  for (int j = 1; j < C; ++j) {
#pragma unroll
    for (int i = j; i > 0; --i) {
      // The list before i is sorted; a later expert with the same key stays behind (ids grow with j).
      if (key[i] > key[i - 1]) {
        const unsigned tk = key[i];
        key[i] = key[i - 1];
        key[i - 1] = tk;
        const int ti = id[i];
        id[i] = id[i - 1];
        id[i - 1] = ti;
        const float ts = score[i];
        score[i] = score[i - 1];
        score[i - 1] = ts;
      }
    }
  }
  int my_id = 0;
  float my_score = 0.0f;
  for (int r = 0; r < p.top_k; ++r) {
    const unsigned best = __reduce_max_sync(kFullMask, key[0]);
    const unsigned tied = __ballot_sync(kFullMask, key[0] == best);
    int winner = __ffs(tied) - 1;
    if (__popc(tied) > 1)  // the same key in several lanes: the lowest expert wins
      winner = __reduce_min_sync(kFullMask, key[0] == best ? static_cast<unsigned>(id[0]) : ~0u) % 32;
    const int chosen = __shfl_sync(kFullMask, id[0], winner);
    const float chosen_score = __shfl_sync(kFullMask, score[0], winner);
    if (lane == r) {
      my_id = chosen;
      my_score = chosen_score;
    }
    if (lane == winner) {
#pragma unroll
      for (int j = 0; j + 1 < C; ++j) {
        key[j] = key[j + 1];
        id[j] = id[j + 1];
        score[j] = score[j + 1];
      }
      key[C - 1] = 0u;
    }
  }
  write_choice(p, my_id, my_score, softmax_sum, ids, weights);
}

// The same for any E: the candidates stay in shared memory and every round scans them.
__device__ void select_topk_scan(const RouterParams& p, const float* l, const float* __restrict__ bias,
                                 float* choice, float* score, int32_t* __restrict__ ids,
                                 float* __restrict__ weights) {
  const int lane = threadIdx.x % 32, E = p.n_experts;
  using routing::RoutingMethod;
  const bool softmax = p.method != RoutingMethod::noaux_tc && p.method != RoutingMethod::topk_softmax;
  float max_logit = -FLT_MAX;
  if (softmax) {
    for (int e = lane; e < E; e += 32) max_logit = fmaxf(max_logit, l[e]);
    max_logit = warp_max(max_logit);
  }
  float sum = 0.0f;
  for (int e = lane; e < E; e += 32) {
    const ExpertScore x = score_expert(p, l[e], e, bias, max_logit);
    choice[e] = x.choice;
    score[e] = x.score;
    if (softmax) sum += x.score;
  }
  if (softmax) sum = warp_sum(sum);
  __syncwarp();
  const bool grouped = p.method == RoutingMethod::group_limited_greedy || p.method == RoutingMethod::noaux_tc;
  if (grouped && p.topk_group < p.n_group) {
    const unsigned kept = kept_groups(p, choice);
    // NOTE: the group lanes read every lane's `choice` above; the shuffles between order no memory, so the
    // warp syncs before the masking overwrites it (compute-sanitizer racecheck flagged the hazard).
    __syncwarp();
    for (int e = lane; e < E; e += 32)
      if (!in_kept_group(p, kept, e)) choice[e] = -INFINITY;
    __syncwarp();
  }

  int my_id = 0;
  float my_score = 0.0f;
  for (int r = 0; r < p.top_k; ++r) {
    ArgMax local{-INFINITY, 1 << 30};
    for (int e = lane; e < E; e += 32) local = better(local, {choice[e], e});
    const ArgMax best = warp_argmax(local);
    __syncwarp();
    if (lane == 0) choice[best.index] = -INFINITY;
    __syncwarp();
    if (lane == r) {
      my_id = best.index;
      my_score = score[best.index];
    }
  }
  write_choice(p, my_id, my_score, sum, ids, weights);
}

// Scores, group masking and top-k of one token by one warp. `choice` and `score` are this warp's shared
// scratch of E floats each. Lane r < k writes the r-th choice.
// NOTE: not inlined (the parameters by value, so that they travel in registers): one copy of the five
// paths per translation unit instead of one in every instance of the fused decode kernel, whose weight
// stream stays as compiled before (measured as fast as inlined on the H200, 2026-11-30).
__device__ __noinline__ void select_topk(const RouterParams p, const float* l, const float* __restrict__ bias,
                                         float* choice, float* score, int32_t* __restrict__ ids,
                                         float* __restrict__ weights) {
  // NOTE: one instance per list length, so that small E does not pay for empty slots (Mixtral's 8 experts
  // took 0.35 us longer in lists of 4).
  if (p.n_experts <= 32) {
    select_topk_in_registers<1>(p, l, bias, choice, ids, weights);
  } else if (p.n_experts <= 64) {
    select_topk_in_registers<2>(p, l, bias, choice, ids, weights);
  } else if (p.n_experts <= 128) {
    select_topk_in_registers<4>(p, l, bias, choice, ids, weights);
  } else if (p.n_experts <= 256) {
    select_topk_in_registers<8>(p, l, bias, choice, ids, weights);
  } else {
    select_topk_scan(p, l, bias, choice, score, ids, weights);
  }
}

}  // namespace
}  // namespace moe::cuda
