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
//   int8: checked twice. The kernels against a reference that applies the same quantisation (x per token,
//         weights per output row from their bf16 values, the SwiGLU activations per row; int8 products
//         summed exactly, fp64 after) to rounding level: 1e-5 (measured: up to 1.2e-7; 1e-7 fails). And the
//         scheme against the unquantised reference: its error depends on the draw (measured median 1.7e-2;
//         one seed in ~170 gave a case of one 40-value activation row 4.1%), so each case gets a gross
//         bound (0.1) and the cases of a test their median a tight one (2.5e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "cpu/fast_experts.h"
#include "cpu/ops.h"
#include "moe/layer/cpu_stages.h"
#include "median_check.h"
#include "scoped_env.h"
#include "test_random.h"

namespace moe::cpu {
namespace {

constexpr double kBf16Tolerance = 1e-2;
constexpr double kInt8KernelTolerance = 1e-5;
constexpr double kInt8SchemeCaseTolerance = 0.1;
constexpr double kInt8SchemeMedianTolerance = 2.5e-2;

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

// The kernels a CPU runs: AVX2, and where the CPU has them AVX-512 and AMX with either stream prefetch.
struct KernelPath {
  Isa isa;
  StreamPrefetch prefetch;
  std::string name() const {
    return std::string(isa_name(isa)) + (isa != Isa::avx2 ? " " + std::string(stream_prefetch_name(prefetch)) : "");
  }
};
std::vector<KernelPath> kernel_paths() {
  std::vector<KernelPath> out = {{Isa::avx2, StreamPrefetch::software}};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni"))
    for (StreamPrefetch prefetch : {StreamPrefetch::software, StreamPrefetch::hardware})
      out.push_back({Isa::avx512, prefetch});
  if (amx_usable())
    for (StreamPrefetch prefetch : {StreamPrefetch::software, StreamPrefetch::hardware})
      out.push_back({Isa::amx, prefetch});
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

// A row quantised as the int8 experts do: symmetric, scale amax / 127; activations round half away from
// zero (fast_experts.cpp), weights to nearest even (fast_pack.cpp). Returns the scale.
float quantise_row(const float* v, int64_t n, bool half_away, int* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  const float inverse = amax > 0.0f && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float r = v[i] * inverse;
    q[i] = half_away ? static_cast<int>(r + (r >= 0.0f ? 0.5f : -0.5f))
                     : static_cast<int>(std::clamp(std::nearbyint(r), -127.0f, 127.0f));
  }
  return amax / 127.0f;
}

// The int8 experts' output computed the slow way: the same quantised values, exact integer dot products,
// fp64 after them. `slack` gets, per output, what its value may differ by because an activation h sits
// so close to a rounding boundary of its quantisation (within 1e-3 of a step) that the kernels' fp32 SwiGLU
// may round it the other way: the weighted down column of one quantisation step.
Tensor int8_scheme_output(const Case& c, const ExpertBatch& batch, std::vector<double>& slack) {
  struct Quantised {
    std::vector<int> q;
    std::vector<float> scale;  // per row
  };
  const auto quantise_weight = [](const Tensor& w) {
    const Tensor f = w.to_f32();
    const int64_t rows = f.size(0), cols = f.size(1);
    Quantised out{std::vector<int>(rows * cols), std::vector<float>(rows)};
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < cols; ++i) row[i] = bf16_to_f32(f32_to_bf16(f.data_as<float>()[r * cols + i]));
      out.scale[r] = quantise_row(row.data(), cols, /*half_away=*/false, out.q.data() + r * cols);
    }
    return out;
  };
  const int64_t T = c.T, H = c.H, I = c.I, k = c.k;
  std::vector<std::array<Quantised, 3>> experts;  // gate, up, down of each expert
  for (const SwigluWeights& e : c.experts)
    experts.push_back({quantise_weight(e.gate), quantise_weight(e.up), quantise_weight(e.down)});
  const Tensor x = c.x.to_f32();
  Tensor out = Tensor::zeros(DType::F32, {T, H});
  slack.assign(T * H, 0.0);
  std::vector<int> xq(H), hq(I);
  std::vector<float> h(I);
  for (int64_t t = 0; t < T; ++t) {
    const float x_scale = quantise_row(x.data_as<float>() + t * H, H, /*half_away=*/true, xq.data());
    for (int64_t j = 0; j < k; ++j) {
      if (batch.pair_rows.data_as<int32_t>()[t * k + j] < 0) continue;  // dropped by the capacity
      const double weight = batch.pair_weights.data_as<float>()[t * k + j];
      const auto& [gate, up, down] = experts[c.topk.ids.data_as<int32_t>()[t * k + j]];
      for (int64_t i = 0; i < I; ++i) {
        int64_t g = 0, u = 0;
        for (int64_t d = 0; d < H; ++d) {
          g += int64_t{xq[d]} * gate.q[i * H + d];
          u += int64_t{xq[d]} * up.q[i * H + d];
        }
        const double gd = double{x_scale} * gate.scale[i] * g, ud = double{x_scale} * up.scale[i] * u;
        h[i] = static_cast<float>(gd / (1 + std::exp(-gd)) * ud);
      }
      const float h_scale = quantise_row(h.data(), I, /*half_away=*/true, hq.data());
      for (int64_t o = 0; o < H; ++o) {
        int64_t sum = 0;
        double near_ties = 0;
        for (int64_t i = 0; i < I; ++i) {
          sum += int64_t{hq[i]} * down.q[o * I + i];
          const double r = h_scale > 0 ? double{h[i]} / h_scale : 0;
          if (std::fabs(std::fabs(r - std::trunc(r)) - 0.5) < 1e-3) near_ties += std::abs(down.q[o * I + i]);
        }
        out.data_as<float>()[t * H + o] += static_cast<float>(weight * h_scale * down.scale[o] * sum);
        slack[t * H + o] += weight * h_scale * down.scale[o] * near_ties;
      }
    }
  }
  return out;
}

// ||max(|got - want| - slack, 0)||₂ / max(||want||₂, norm_floor).
double normwise_error_beyond(const Tensor& got, const Tensor& want, const std::vector<double>& slack,
                             double norm_floor) {
  const float* a = got.data_as<float>();
  const float* b = want.data_as<float>();
  double diff = 0, norm = 1e-300;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;  // NaN never passes
    const double excess = std::max(0.0, std::fabs(double{a[i]} - b[i]) - slack[i]);
    diff += excess * excess;
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff / std::max(norm, norm_floor * norm_floor));
}

// Runs the fused stage with the given ISA on the batch's routing tables.
Tensor fast_output(const Case& c, const ExpertBatch& batch, const std::vector<PackedExpertPtr>& packed,
                   const KernelPath& path) {
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
  fused_swiglu_experts(segments, c.x, out, path.isa, path.prefetch);
  return out;
}

// Checks the fast experts on both paradigms and every kernel path; int8 returns the scheme's errors (against the
// unquantised reference) for the caller's median.
std::vector<double> expect_close(const Case& c, quant::WeightFormat format, const std::string& what) {
  const std::vector<PackedExpertPtr> packed = pack_experts(c.experts, format);
  const ExpertBatch contiguous = permute_contiguous(c.x, c.topk, static_cast<int>(c.E));
  const int64_t capacity = std::max<int64_t>(1, c.T * c.k / c.E);  // some pairs dropped
  const ExpertBatch padded = permute_padded(c.x, c.topk, static_cast<int>(c.E), capacity, OverflowPolicy::renormalize);
  std::vector<double> scheme_errors;
  for (const ExpertBatch* batch : {&contiguous, &padded}) {
    const std::string where =
        what + " " + std::string(quant::weight_format_name(format)) + (batch == &padded ? " padded" : " contiguous");
    const Tensor want = reference_output(c, *batch);
    const double term_norm = down_term_norm(c, *batch);
    std::vector<double> slack;
    const Tensor scheme = format == quant::WeightFormat::int8 ? int8_scheme_output(c, *batch, slack) : Tensor{};
    if (format == quant::WeightFormat::int8) {
      scheme_errors.push_back(normwise_error(scheme, want, term_norm));
      EXPECT_LE(scheme_errors.back(), kInt8SchemeCaseTolerance) << where << ": the int8 scheme itself";
    }
    for (const KernelPath& path : kernel_paths()) {
      const Tensor got = fast_output(c, *batch, packed, path);
      if (format == quant::WeightFormat::bf16) {
        EXPECT_LE(normwise_error(got, want, term_norm), kBf16Tolerance) << where << " " << path.name();
      } else {
        EXPECT_LE(normwise_error_beyond(got, scheme, slack, term_norm), kInt8KernelTolerance)
            << where << " " << path.name() << " against the same quantisation";
      }
    }
  }
  return scheme_errors;
}

TEST(FastExperts, MatchReferenceOnOddShapes) {
  test::TestRng rng;
  std::vector<double> int8_errors;
  struct Shape {
    int64_t T, H, I, E, k;
  };
  // T = 1 and primes; H and I not multiples of the 64 / 32 blocks; E not a power of two. (Sums of fewer
  // than ~16 terms cancel too often for a relative bound; TinySizesRun covers those.)
  for (const Shape s : {Shape{1, 64, 32, 4, 2}, Shape{2, 72, 40, 3, 1}, Shape{13, 130, 70, 5, 2}, Shape{97, 72, 33, 7, 3},
                        Shape{31, 256, 96, 12, 4}, Shape{3, 48, 24, 3, 3},
                        // 7-23 rows per expert: a full first panel, then shorter ones (for_each_panel)
                        Shape{9, 130, 40, 1, 1}, Shape{12, 64, 32, 1, 1}, Shape{23, 96, 48, 3, 1},
                        // bf16 wide panels (7-12 rows an expert, one pass in chunks of 64 k pairs): 2 full
                        // chunks of gate/up and 1 + a part of down; 2.5 and exactly 1; 13 rows keep panels of <= 6
                        Shape{10, 200, 136, 1, 1}, Shape{8, 320, 100, 1, 1}, Shape{7, 72, 33, 1, 1},
                        Shape{13, 130, 70, 1, 1},
                        // AMX tile panels (up to 16 tokens): exactly 16, 16 + 1, and 16 + 12 + 12
                        Shape{16, 64, 32, 1, 1}, Shape{17, 96, 48, 1, 1}, Shape{40, 200, 136, 1, 1}})
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (quant::WeightFormat format : {quant::WeightFormat::bf16, quant::WeightFormat::int8}) {
        const Case c = random_case(rng, s.T, s.H, s.I, s.E, s.k, dtype);
        const std::vector<double> errors =
            expect_close(c, format,
                         "T " + std::to_string(s.T) + " H " + std::to_string(s.H) + " I " + std::to_string(s.I) +
                             " E " + std::to_string(s.E) + " k " + std::to_string(s.k) + " " +
                             std::string(dtype_name(dtype)));
        int8_errors.insert(int8_errors.end(), errors.begin(), errors.end());
      }
  test::expect_median_within(int8_errors, kInt8SchemeMedianTolerance, "the int8 scheme");
}

TEST(FastExperts, TinySizesRun) {
  // H = 2, I = 1: every block is mostly padding; only a loose bound (a 2-term sum has no averaging).
  test::TestRng rng;
  const Case c = random_case(rng, 8, 2, 1, 3, 3, DType::F32);
  const ExpertBatch batch = permute_contiguous(c.x, c.topk, 3);
  for (quant::WeightFormat format : {quant::WeightFormat::bf16, quant::WeightFormat::int8})
    for (const KernelPath& path : kernel_paths())
      EXPECT_LE(normwise_error(fast_output(c, batch, pack_experts(c.experts, format), path), reference_output(c, batch)),
                0.2);
}

TEST(FastExperts, ExpertsWithNoTokensAndAllTokensOnOneExpert) {
  test::TestRng rng;
  std::vector<double> int8_errors;
  for (quant::WeightFormat format : {quant::WeightFormat::bf16, quant::WeightFormat::int8})
    for (const std::vector<double>& errors :
         {expect_close(random_case(rng, 29, 96, 48, 6, 2, DType::BF16, -1, {0, 3, 5}), format, "dead experts"),
          expect_close(random_case(rng, 41, 96, 48, 5, 1, DType::BF16, /*hot=*/2), format, "all tokens on expert 2"),
          expect_close(random_case(rng, 23, 64, 64, 5, 2, DType::BF16, /*hot=*/4, {0, 1}), format, "hot and dead")})
      int8_errors.insert(int8_errors.end(), errors.begin(), errors.end());
  test::expect_median_within(int8_errors, kInt8SchemeMedianTolerance, "the int8 scheme");
}

TEST(FastExperts, LongReductionsUseChunkedDownProjection) {
  // I > 8192 takes the down projection in k chunks (bf16); one expert keeps it fast.
  test::TestRng rng;
  const Case c = random_case(rng, 7, 64, 8200, 1, 1, DType::BF16);
  expect_close(c, quant::WeightFormat::bf16, "I 8200");
}

TEST(FastExperts, OutputIsAddedToAndIndependentOfThreadSplit) {
  test::TestRng rng;
  const Case c = random_case(rng, 19, 128, 64, 6, 2, DType::BF16);
  const auto packed = pack_experts(c.experts, quant::WeightFormat::bf16);
  const ExpertBatch batch = permute_contiguous(c.x, c.topk, 6);
  for (const KernelPath& path : kernel_paths()) {
    const Tensor once = fast_output(c, batch, packed, path);
    const Tensor again = fast_output(c, batch, packed, path);
    EXPECT_EQ(0, std::memcmp(once.data(), again.data(), once.nbytes())) << "not deterministic on " << path.name();
    // On one thread: a loop of the pool run from inside one of its own tasks runs serially on that thread.
    Tensor serial;
    ThreadPool::global().parallel_for(2, 1, [&](int64_t i, int64_t) {
      if (i == 0) serial = fast_output(c, batch, packed, path);
    });
    EXPECT_EQ(0, std::memcmp(once.data(), serial.data(), once.nbytes())) << "one thread differs on " << path.name();
  }
}

TEST(FastExperts, AliasedExpertsSharePackedWeights) {
  test::TestRng rng;
  Case c = random_case(rng, 4, 64, 32, 3, 1, DType::BF16);
  c.experts[2] = c.experts[0];
  const auto packed = pack_experts(c.experts, quant::WeightFormat::bf16);
  EXPECT_EQ(packed[0].get(), packed[2].get());
  EXPECT_NE(packed[0].get(), packed[1].get());
}

TEST(FastExperts, IsaCanBeForcedByEnvironment) {
  const test::ScopedEnv isa("MOE_CPU_ISA");
  isa.set("avx2");
  EXPECT_EQ(detect_isa(), Isa::avx2);
  isa.set("amx");
  if (amx_usable()) {
    EXPECT_EQ(detect_isa(), Isa::amx);
  } else {
    EXPECT_THROW(detect_isa(), Error) << "amx asked for on a CPU (or OS) without it";
  }
  isa.set("sse");
  EXPECT_THROW(detect_isa(), Error);
}

TEST(FastExperts, StreamPrefetchCanBeForcedByEnvironment) {
  const test::ScopedEnv prefetch("MOE_CPU_STREAM_PREFETCH");
  prefetch.set("hardware");
  EXPECT_EQ(detect_stream_prefetch(), StreamPrefetch::hardware);
  prefetch.set("software");
  EXPECT_EQ(detect_stream_prefetch(), StreamPrefetch::software);
  prefetch.set("auto");
  EXPECT_THROW(detect_stream_prefetch(), Error);
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
  auto fused = make_cpu_fast_experts(c.experts, quant::WeightFormat::bf16);
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
