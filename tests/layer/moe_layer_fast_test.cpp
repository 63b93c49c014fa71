// MoeLayer on its default fast CPU experts (bf16 and int8 weights, both paradigms, shared experts, every
// family) against the float64 oracle, at the fast path's tolerances (normwise relative error ≤ 1e-2 for
// bf16, ≤ 4e-2 for int8; see tests/cpu/fast_experts_test.cpp). Routing is computed in fp64 as in the
// reference, so the chosen experts match exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "layer_test_util.h"
#include "moe/layer/moe_layer.h"
#include "moe_reference_f64.h"

namespace moe {
namespace {

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
  for (const char* type : test::kMoeModelTypes)
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (cpu::WeightFormat format : {cpu::WeightFormat::bf16, cpu::WeightFormat::int8}) {
        // Sizes of at least 16 so that the relative bound is meaningful (tiny sums cancel).
        test::MoeCase c = test::random_moe_case(type, rng, {.weight_dtype = dtype, .input_dtype = dtype});
        const std::string what = std::string(type) + " " + std::string(dtype_name(dtype)) + " " +
                                 std::string(cpu::weight_format_name(format));
        const double tolerance = format == cpu::WeightFormat::bf16 ? 1e-2 : 4e-2;
        const auto want = test::moe_reference_f64(c.config, [&](const std::string& n) { return c.weight(n); }, c.x);
        const LayerOutput got = run(c, {.cpu_weights = format});
        if (want.hidden >= 16) {
          EXPECT_LE(normwise_error(got.hidden_states, want.out), tolerance) << what;
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
}

TEST(MoeLayerFast, PaddedParadigmDropsAsTheReference) {
  test::TestRng rng;
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
        EXPECT_LE(normwise_error(got.hidden_states, want.out), 1e-2) << type;
      }
    }
}

}  // namespace
}  // namespace moe
