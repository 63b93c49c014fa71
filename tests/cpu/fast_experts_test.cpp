// The fast CPU experts against the reference ops (grouped_swiglu + unpermute, fp64-accumulated), on random
// inputs and odd shapes, both paradigms, both ISA paths (AVX-512 where the CPU has it, and the AVX2
// fallback), bf16 and int8 weights.
//
// Tolerances (normwise relative error ||fast - ref||₂ / ||ref||₂; NaN never passes):
//   bf16: 1e-2. Weights and activations are rounded to bf16 (relative 2^-9 each, random signs); measured
//         over 672 cases of the shapes below: median 3.9e-3, largest 7.1e-3.
// Those rounding errors scale with the down sum's terms, not with the sum: where an output element's
// terms cancel (a 64-term sum of T 1, I 32, k 2 did, one seed in many), the norm of the output
// understates them. So the error is taken relative to the larger of ||ref|| and the terms' norm
// sqrt(sum over outputs and terms of term²) (`down_term_norm`), which equal each other on average for
// random signs and differ only where the sums cancel.
//   int8: 4e-2. Per-channel int8 weights and per-token int8 activations (2 quantisations per projection);
//         measured: median 1.7e-2, largest 2.7e-2 on these Gaussian inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "moe/core/thread_pool.h"
#include "moe/cpu/fast_experts.h"
#include "moe/cpu/ops.h"
#include "moe/layer/modular.h"
#include "test_random.h"

namespace moe::cpu {
namespace {

constexpr double kBf16Tolerance = 1e-2;
constexpr double kInt8Tolerance = 4e-2;

// ||got - want||₂ / max(||want||₂, norm_floor).
double normwise_error(const Tensor& got, const Tensor& want, double norm_floor = 0) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  const float* a = got.data_as<float>();
  const float* b = want.data_as<float>();
  double diff = 0, norm = 1e-300;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;  // NaN never passes
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff / std::max(norm, norm_floor * norm_floor));
}

std::vector<Isa> isas() {
  std::vector<Isa> out = {Isa::avx2};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni")) out.push_back(Isa::avx512);
  return out;
}

struct Case {
  int64_t T, H, I, E, k;
  std::vector<SwigluWeights> experts;
  Tensor x;
  TopK topk;
};

// Random experts and routing; `hot` >= 0 sends every token's first choice to that expert, `dead` experts
// get no token.
Case random_case(test::TestRng& rng, int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, DType dtype,
                 int hot = -1, std::vector<int> dead = {}) {
  Case c{T, H, I, E, k, {}, rng.normal_tensor({T, H}), {}};
  for (int64_t e = 0; e < E; ++e)
    c.experts.push_back({rng.normal_tensor({I, H}, 1.0f / std::sqrt(float(H)), dtype),
                         rng.normal_tensor({I, H}, 1.0f / std::sqrt(float(H)), dtype),
                         rng.normal_tensor({H, I}, 1.0f / std::sqrt(float(I)), dtype)});
  c.topk.ids = Tensor::empty(DType::I32, {T, k});
  c.topk.weights = Tensor::empty(DType::F32, {T, k});
  std::vector<int> allowed;
  for (int e = 0; e < E; ++e)
    if (std::find(dead.begin(), dead.end(), e) == dead.end()) allowed.push_back(e);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int> pool = allowed;
    std::shuffle(pool.begin(), pool.end(), rng.engine());
    if (hot >= 0) std::iter_swap(pool.begin(), std::find(pool.begin(), pool.end(), hot));
    for (int64_t j = 0; j < k; ++j) {
      c.topk.ids.data_as<int32_t>()[t * k + j] = pool[j];
      c.topk.weights.data_as<float>()[t * k + j] = 0.1f + std::fabs(rng.normal());
    }
  }
  return c;
}

Tensor reference_output(const Case& c, const ExpertBatch& batch) {
  return unpermute(grouped_swiglu(batch, c.experts, 0), batch);
}

// sqrt(sum over tokens t, outputs o, kept pairs (e, w) and i of (w · down_e[o, i] · h_e,t[i])²), h in fp64:
// the scale of the rounding errors of the final sums, whether or not those sums cancel.
double down_term_norm(const Case& c, const ExpertBatch& batch) {
  const Tensor x = c.x.to_f32();
  std::vector<SwigluWeights> f32;  // each expert's matrices in F32, converted once
  for (const SwigluWeights& e : c.experts) f32.push_back({e.gate.to_f32(), e.up.to_f32(), e.down.to_f32()});
  double sum = 0;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 0; j < c.k; ++j) {
      if (batch.pair_rows.data_as<int32_t>()[t * c.k + j] < 0) continue;  // dropped by the capacity
      const double w = batch.pair_weights.data_as<float>()[t * c.k + j];
      const auto& [gate, up, down] = f32[c.topk.ids.data_as<int32_t>()[t * c.k + j]];
      std::vector<double> h(c.I);
      for (int64_t i = 0; i < c.I; ++i) {
        double g = 0, u = 0;
        for (int64_t d = 0; d < c.H; ++d) {
          g += double{gate.data_as<float>()[i * c.H + d]} * x.data_as<float>()[t * c.H + d];
          u += double{up.data_as<float>()[i * c.H + d]} * x.data_as<float>()[t * c.H + d];
        }
        h[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t o = 0; o < c.H; ++o)
        for (int64_t i = 0; i < c.I; ++i) sum += std::pow(w * down.data_as<float>()[o * c.I + i] * h[i], 2);
    }
  return std::sqrt(sum);
}

// Runs the fused stage with the given ISA on the batch's routing tables.
Tensor fast_output(const Case& c, const ExpertBatch& batch, const std::vector<PackedExpertPtr>& packed, Isa isa) {
  std::vector<float> row_weight(batch.row_token.size(0), 0.0f);
  for (int64_t i = 0; i < batch.pair_rows.numel(); ++i)
    if (batch.pair_rows.data_as<int32_t>()[i] >= 0)
      row_weight[batch.pair_rows.data_as<int32_t>()[i]] = batch.pair_weights.data_as<float>()[i];
  std::vector<ExpertRows> segments;
  for (int64_t e = 0; e < c.E; ++e)
    segments.push_back({.expert = packed[e].get(),
                        .token = batch.row_token.data_as<int32_t>() + batch.expert_offsets.data_as<int64_t>()[e],
                        .weight = row_weight.data() + batch.expert_offsets.data_as<int64_t>()[e],
                        .count = batch.expert_counts.data_as<int64_t>()[e]});
  Tensor out = Tensor::zeros(DType::F32, {c.T, c.H});
  fused_swiglu_experts(segments, c.x, out, isa);
  return out;
}

void expect_close(const Case& c, WeightFormat format, const std::string& what) {
  const std::vector<PackedExpertPtr> packed = pack_experts(c.experts, format);
  const double tolerance = format == WeightFormat::bf16 ? kBf16Tolerance : kInt8Tolerance;
  const ExpertBatch contiguous = permute_contiguous(c.x, c.topk, static_cast<int>(c.E));
  const int64_t capacity = std::max<int64_t>(1, c.T * c.k / c.E);  // some pairs dropped
  const ExpertBatch padded = permute_padded(c.x, c.topk, static_cast<int>(c.E), capacity, OverflowPolicy::renormalize);
  for (Isa isa : isas())
    for (const ExpertBatch* batch : {&contiguous, &padded}) {
      const double error =
          normwise_error(fast_output(c, *batch, packed, isa), reference_output(c, *batch), down_term_norm(c, *batch));
      EXPECT_LE(error, tolerance) << what << " " << isa_name(isa) << " " << weight_format_name(format)
                                  << (batch == &padded ? " padded" : " contiguous");
    }
}

TEST(FastExperts, MatchReferenceOnOddShapes) {
  test::TestRng rng;
  struct Shape {
    int64_t T, H, I, E, k;
  };
  // T = 1 and primes; H and I not multiples of the 64 / 32 blocks; E not a power of two. (Sums of fewer
  // than ~16 terms cancel too often for a relative bound; TinySizesRun covers those.)
  for (const Shape s : {Shape{1, 64, 32, 4, 2}, Shape{2, 72, 40, 3, 1}, Shape{13, 130, 70, 5, 2}, Shape{97, 72, 33, 7, 3},
                        Shape{31, 256, 96, 12, 4}, Shape{3, 48, 24, 3, 3},
                        // 7-23 rows per expert: a full first panel, then shorter ones (for_each_panel)
                        Shape{9, 130, 40, 1, 1}, Shape{12, 64, 32, 1, 1}, Shape{23, 96, 48, 3, 1}})
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (WeightFormat format : {WeightFormat::bf16, WeightFormat::int8}) {
        const Case c = random_case(rng, s.T, s.H, s.I, s.E, s.k, dtype);
        expect_close(c, format,
                     "T " + std::to_string(s.T) + " H " + std::to_string(s.H) + " I " + std::to_string(s.I) + " E " +
                         std::to_string(s.E) + " k " + std::to_string(s.k) + " " + std::string(dtype_name(dtype)));
      }
}

TEST(FastExperts, TinySizesRun) {
  // H = 2, I = 1: every block is mostly padding; only a loose bound (a 2-term sum has no averaging).
  test::TestRng rng;
  const Case c = random_case(rng, 8, 2, 1, 3, 3, DType::F32);
  const ExpertBatch batch = permute_contiguous(c.x, c.topk, 3);
  for (WeightFormat format : {WeightFormat::bf16, WeightFormat::int8})
    for (Isa isa : isas())
      EXPECT_LE(normwise_error(fast_output(c, batch, pack_experts(c.experts, format), isa), reference_output(c, batch)),
                0.2);
}

TEST(FastExperts, ExpertsWithNoTokensAndAllTokensOnOneExpert) {
  test::TestRng rng;
  for (WeightFormat format : {WeightFormat::bf16, WeightFormat::int8}) {
    expect_close(random_case(rng, 29, 96, 48, 6, 2, DType::BF16, -1, {0, 3, 5}), format, "dead experts");
    expect_close(random_case(rng, 41, 96, 48, 5, 1, DType::BF16, /*hot=*/2), format, "all tokens on expert 2");
    expect_close(random_case(rng, 23, 64, 64, 5, 2, DType::BF16, /*hot=*/4, {0, 1}), format, "hot and dead");
  }
}

TEST(FastExperts, LongReductionsUseChunkedDownProjection) {
  // I > 8192 takes the down projection in k chunks (bf16); one expert keeps it fast.
  test::TestRng rng;
  const Case c = random_case(rng, 7, 64, 8200, 1, 1, DType::BF16);
  expect_close(c, WeightFormat::bf16, "I 8200");
}

TEST(FastExperts, OutputIsAddedToAndIndependentOfThreadSplit) {
  test::TestRng rng;
  const Case c = random_case(rng, 19, 128, 64, 6, 2, DType::BF16);
  const auto packed = pack_experts(c.experts, WeightFormat::bf16);
  const ExpertBatch batch = permute_contiguous(c.x, c.topk, 6);
  for (Isa isa : isas()) {
    const Tensor once = fast_output(c, batch, packed, isa);
    const Tensor again = fast_output(c, batch, packed, isa);
    EXPECT_EQ(0, std::memcmp(once.data(), again.data(), once.nbytes())) << "not deterministic on " << isa_name(isa);
  }
}

TEST(FastExperts, AliasedExpertsSharePackedWeights) {
  test::TestRng rng;
  Case c = random_case(rng, 4, 64, 32, 3, 1, DType::BF16);
  c.experts[2] = c.experts[0];
  const auto packed = pack_experts(c.experts, WeightFormat::bf16);
  EXPECT_EQ(packed[0].get(), packed[2].get());
  EXPECT_NE(packed[0].get(), packed[1].get());
}

TEST(FastExperts, IsaCanBeForcedByEnvironment) {
  const char* before = std::getenv("MOE_CPU_ISA");
  const std::string saved = before ? before : "";
  setenv("MOE_CPU_ISA", "avx2", 1);
  EXPECT_EQ(detect_isa(), Isa::avx2);
  setenv("MOE_CPU_ISA", "sse", 1);
  EXPECT_THROW(detect_isa(), Error);
  if (before) setenv("MOE_CPU_ISA", saved.c_str(), 1); else unsetenv("MOE_CPU_ISA");
}

TEST(FastRouter, EqualsTheReferenceRouter) {
  test::TestRng rng;
  for (int64_t T : {1, 5, 64})
    for (int64_t E : {3, 8, 61}) {
      const int64_t H = 1 + rng.uniform_int(0, 300);
      const Tensor x = rng.normal_tensor({T, H});
      const Tensor w = rng.normal_tensor({E, H});
      const Tensor fast = router_logits_fast(x, w), reference = router_logits(x, w);
      // fp64 sums in another order, rounded once: equal but for a rare last-bit tie.
      for (int64_t i = 0; i < T * E; ++i)
        ASSERT_NEAR(fast.data_as<float>()[i], reference.data_as<float>()[i],
                    1e-6f * (1 + std::fabs(reference.data_as<float>()[i])));
    }
}

// A lone token (T = 1, or the last of T = 4n + 1) takes the one-token kernel: its logits must be
// bit-identical to the same token's inside a block of four, so that routing never depends on the batch.
TEST(FastRouter, OneTokenKernelEqualsTheBlockedKernel) {
  test::TestRng rng;
  for (int64_t E : {1, 7, 128})
    for (int64_t H : {5, 64, 2048, 2051}) {
      SCOPED_TRACE("E " + std::to_string(E) + ", H " + std::to_string(H));
      const Tensor x = rng.normal_tensor({5, H});
      const Tensor w = rng.normal_tensor({E, H});
      const Tensor batch = router_logits_fast(x, w);  // [5, E]: tokens 0-3 blocked, token 4 alone
      for (int64_t t = 0; t < 5; ++t) {
        Tensor one = Tensor::empty(DType::F32, {1, H});
        std::memcpy(one.data(), x.data_as<float>() + t * H, H * sizeof(float));
        const Tensor alone = router_logits_fast(one, w);  // [1, E]
        for (int64_t e = 0; e < E; ++e)
          ASSERT_EQ(std::bit_cast<uint32_t>(alone.data_as<float>()[e]),
                    std::bit_cast<uint32_t>(batch.data_as<float>()[t * E + e]))
              << "token " << t << ", expert " << e;
      }
    }
}

TEST(FastExperts, FusedStageMatchesReferenceStages) {
  test::TestRng rng;
  const Case c = random_case(rng, 37, 80, 40, 7, 3, DType::BF16);
  auto fused = make_cpu_fast_experts(c.experts, WeightFormat::bf16);
  for (bool padded : {false, true}) {
    auto prepare = padded ? make_local_padded_prepare(7, 0.8, OverflowPolicy::drop, /*copy_rows=*/false)
                          : make_local_contiguous_prepare(7, /*copy_rows=*/false);
    auto reference_prepare =
        padded ? make_local_padded_prepare(7, 0.8, OverflowPolicy::drop) : make_local_contiguous_prepare(7);
    const ExpertBatch index_only = prepare->prepare(c.x, c.topk);
    EXPECT_EQ(index_only.rows.size(1), 0);
    Tensor out = Tensor::zeros(DType::F32, {c.T, c.H});
    fused->run(c.x, index_only, out);
    const ExpertBatch full = reference_prepare->prepare(c.x, c.topk);
    EXPECT_LE(normwise_error(out, reference_output(c, full)), kBf16Tolerance) << (padded ? "padded" : "contiguous");
  }
}

}  // namespace
}  // namespace moe::cpu
