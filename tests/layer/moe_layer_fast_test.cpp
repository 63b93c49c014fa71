// MoeLayer on its default fast CPU experts (bf16 and int8 weights, both paradigms, shared experts, every
// family) against the float64 oracle. Routing is computed in fp64 as in the reference, so the chosen
// experts match exactly. The kernels' own numerics are checked tightly in tests/cpu/fast_experts_test.cpp;
// here the error is the weight format's, which depends on the drawn case: a case with few terms (I 5, 10
// down terms a token) does not average its roundings. Measured normwise relative errors over 6,600 cases:
//   bf16 from F32/F16 weights: median 4.2e-3, largest 1.0e-2 (H 62, I 5); from BF16 weights: largest 2.7e-3.
//   int8: median 1.6e-2, largest 3.4e-2; a test's median over its cases: bf16 3.1-4.3e-3, int8 1.5-1.8e-2.
// So each case gets a gross bound (a wrong expert, weight or missing shared expert errs by O(1)) and the
// test's cases per format a tight median (a coarser rounding anywhere moves it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "layer_test_util.h"
#include "median_check.h"
#include "moe/layer/moe_layer.h"
#include "moe_reference_f64.h"

namespace moe {
namespace {

struct FormatBounds {
  double per_case;
  double median;
};
constexpr FormatBounds kBf16Bounds{.per_case = 2.5e-2, .median = 6e-3};
constexpr FormatBounds kInt8Bounds{.per_case = 0.1, .median = 2.5e-2};

double normwise_error(const Tensor& got, const std::vector<double>& want) {
  double diff = 0, norm = 1e-300;
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = got.data_as<float>()[i];
    if (!std::isfinite(a)) return INFINITY;  // NaN never passes
    diff += (a - want[i]) * (a - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

LayerOutput run(const test::MoeCase& c, LayerOptions options) {
  const MoeConfig config = parse_moe_config(c.config);
  test::TempDir dir;
  MoeLayer layer(config, test::load_case_weights(c, config, dir.path()), options);
  return layer.forward(c.x);
}

TEST(MoeLayerFast, IsTheDefault) { EXPECT_EQ(LayerOptions{}.cpu_experts, CpuExperts::fast); }

TEST(MoeLayerFast, EveryFamilyBothParadigmsBothFormats) {
  test::TestRng rng;
  std::vector<double> bf16_errors, int8_errors;
  for (const char* type : test::kMoeModelTypes)
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (quant::WeightFormat format : {quant::WeightFormat::bf16, quant::WeightFormat::int8}) {
        // Sizes of at least 16 so that the relative bound is meaningful (tiny sums cancel).
        test::MoeCase c = test::random_moe_case(type, rng, {.weight_dtype = dtype, .input_dtype = dtype});
        const std::string what = std::string(type) + " " + std::string(dtype_name(dtype)) + " " +
                                 std::string(quant::weight_format_name(format));
        const bool bf16 = format == quant::WeightFormat::bf16;
        const auto want = test::moe_reference_f64(c.config, [&](const std::string& n) { return c.weight(n); }, c.x);
        const LayerOutput got = run(c, {.cpu_weights = format});
        if (want.hidden >= 16) {
          const double error = normwise_error(got.hidden_states, want.out);
          EXPECT_LE(error, (bf16 ? kBf16Bounds : kInt8Bounds).per_case) << what;
          (bf16 ? bf16_errors : int8_errors).push_back(error);
        }
        for (size_t i = 0; i < want.ids.size(); ++i) {
          if (want.selection_margin[i / want.top_k] > 1e-5) {
            EXPECT_EQ(got.topk.ids.data_as<int32_t>()[i], want.ids[i]) << what;
          }
        }
        // The padded paradigm with room for every pair is bit-identical to the contiguous one.
        const LayerOutput padded =
            run(c, {.paradigm = Paradigm::padded, .capacity_factor = 1000.0, .cpu_weights = format});
        EXPECT_EQ(0, std::memcmp(got.hidden_states.data(), padded.hidden_states.data(), got.hidden_states.nbytes()))
            << what;
      }
  test::expect_median_within(bf16_errors, kBf16Bounds.median, "bf16");
  test::expect_median_within(int8_errors, kInt8Bounds.median, "int8");
}

TEST(MoeLayerFast, PaddedParadigmDropsAsTheReference) {
  test::TestRng rng;
  std::vector<double> errors;
  for (const char* type : test::kMoeModelTypes)
    for (bool renormalize : {false, true}) {
      const test::MoeCase c = test::random_moe_case(type, rng, {.tokens = 24});
      const test::PaddedOptions padded{.capacity_factor = 0.5, .renormalize = renormalize};
      const auto want =
          test::moe_reference_f64(c.config, [&](const std::string& n) { return c.weight(n); }, c.x, &padded);
      const LayerOutput got =
          run(c, {.paradigm = Paradigm::padded, .capacity_factor = 0.5,
                  .overflow = renormalize ? OverflowPolicy::renormalize : OverflowPolicy::drop});
      EXPECT_EQ(got.stats.dropped_pairs, want.dropped_pairs) << type;
      if (want.hidden >= 16) {
        errors.push_back(normwise_error(got.hidden_states, want.out));
        EXPECT_LE(errors.back(), kBf16Bounds.per_case) << type;
      }
    }
  test::expect_median_within(errors, kBf16Bounds.median, "padded");
}

}  // namespace
}  // namespace moe
