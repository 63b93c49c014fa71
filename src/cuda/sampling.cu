// The next token of each row of logits (model::TokenChoice's rule, model/token_choice.cpp on the host): one
// block per row. Greedy is the block's argmax. A draw finds its thresholds by radix selection over the
// order-preserving integer keys of the fp32 logits (32 passes over the row, which stays in L2): top-k's is
// the k-th largest key, top-p's the largest key whose tokens at or above it weigh at least top_p of the kept
// mass; then a block scan of the kept weights in id order finds the token at uniform · mass.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"

namespace moe::cuda {

namespace {

constexpr int kThreads = 1024;

// Keys that order as the floats do (NaN aside).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t bits = __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

struct ArgMax {
  float value;
  int32_t id;
};

struct Better {  // the larger value; ties to the lower id
  __device__ __forceinline__ ArgMax operator()(ArgMax a, ArgMax b) const {
    return (b.value > a.value || (b.value == a.value && b.id < a.id)) ? b : a;
  }
};

struct MaxInt {
  __device__ __forceinline__ int operator()(int a, int b) const { return a > b ? a : b; }
};

__global__ void __launch_bounds__(kThreads)
    choose_tokens_kernel(const float* __restrict__ logits, int64_t vocab,
                         const TokenChoiceArgs* __restrict__ choices, int32_t* __restrict__ out) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  using ReduceMax = cub::BlockReduce<ArgMax, kThreads>;
  using ReduceCount = cub::BlockReduce<int, kThreads>;
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename ReduceMax::TempStorage reduce_max;
    typename ReduceCount::TempStorage reduce_count;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ ArgMax best;
  __shared__ uint32_t threshold;
  __shared__ double mass_shared;
  __shared__ int32_t chosen;

  const float* row = logits + blockIdx.x * vocab;
  const TokenChoiceArgs c = choices[blockIdx.x];
  const int t = threadIdx.x;

  ArgMax mine{-INFINITY, INT32_MAX};
  for (int64_t i = t; i < vocab; i += kThreads) mine = Better{}(mine, {row[i], static_cast<int32_t>(i)});
  const ArgMax block_best = ReduceMax(temp.reduce_max).Reduce(mine, Better{});
  if (t == 0) best = block_best, threshold = 0;
  __syncthreads();
  if (c.temperature == 0.0f) {
    if (t == 0) out[blockIdx.x] = best.id;
    return;
  }
  const float max_logit = best.value;
  // NOTE: in double, as the host's rule: the weights then agree to the last bit or nearly, and so do the
  // draws.
  const auto weight = [&](float l) { return exp((double(l) - double(max_logit)) / double(c.temperature)); };

  // The largest key c with select(c), built bit by bit from the top.
  const auto radix_select = [&](auto&& enough) {
    uint32_t found = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t candidate = found | (1u << bit);
      if (enough(candidate)) found = candidate;
    }
    return found;
  };
  if (c.top_k > 0 && c.top_k < vocab) {
    const uint32_t key = radix_select([&](uint32_t candidate) {
      int n = 0;
      for (int64_t i = t; i < vocab; i += kThreads) n += order_key(row[i]) >= candidate;
      const int total = ReduceCount(temp.reduce_count).Sum(n);
      if (t == 0) mass_shared = total;
      __syncthreads();
      const bool ok = mass_shared >= c.top_k;
      __syncthreads();
      return ok;
    });
    if (t == 0) threshold = key;
    __syncthreads();
  }
  const uint32_t k_threshold = threshold;
  const auto kept_mass = [&](uint32_t at_least) {
    double m = 0;
    for (int64_t i = t; i < vocab; i += kThreads)
      if (order_key(row[i]) >= at_least) m += weight(row[i]);
    const double total = Reduce(temp.reduce).Sum(m);
    if (t == 0) mass_shared = total;
    __syncthreads();
    const double result = mass_shared;
    __syncthreads();
    return result;
  };
  if (c.top_p < 1.0f) {
    const double target = double(c.top_p) * kept_mass(k_threshold);
    const uint32_t key =
        radix_select([&](uint32_t candidate) { return kept_mass(max(candidate, k_threshold)) >= target; });
    if (t == 0) threshold = max(key, k_threshold);
    __syncthreads();
  }
  const uint32_t kept_from = threshold;
  const double r = c.uniform * kept_mass(kept_from);

  // Each thread a contiguous chunk of ids, so that the scan's order is id order.
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t begin = t * chunk < vocab ? t * chunk : vocab,
                end = begin + chunk < vocab ? begin + chunk : vocab;
  double own = 0;
  int32_t last_kept = -1;
  for (int64_t i = begin; i < end; ++i)
    if (order_key(row[i]) >= kept_from) own += weight(row[i]), last_kept = static_cast<int32_t>(i);
  double before = 0;
  Scan(temp.scan).ExclusiveSum(own, before);
  if (t == 0) chosen = -1;
  __syncthreads();
  if (r >= before && r < before + own) {
    double cum = before;
    for (int64_t i = begin; i < end; ++i) {
      if (order_key(row[i]) < kept_from) continue;
      cum += weight(row[i]);
      if (r < cum) {
        chosen = static_cast<int32_t>(i);
        break;
      }
    }
  }
  __syncthreads();
  // Only through rounding at the very top of the range: the last kept token.
  const int last = ReduceCount(temp.reduce_count).Reduce(last_kept, MaxInt{});
  if (t == 0) out[blockIdx.x] = chosen >= 0 ? chosen : last;
}

}  // namespace

void choose_tokens(const float* logits, int64_t rows, int64_t vocab, const TokenChoiceArgs* choices,
                   int32_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  choose_tokens_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, choices, out);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::cuda
