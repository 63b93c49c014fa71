#include "moe/layer/moe_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "layer_test_util.h"
#include "moe_reference_f64.h"

namespace moe {
namespace {

using test::MoeCase;

struct Compared {
  double rel_error;   // max |out - ref| / max |ref|
  bool ids_equal;
  double weight_error;
};

Compared compare(const LayerOutput& got, const test::ReferenceResult& want) {
  Compared c{0, true, 0};
  double scale = 1e-30, worst = 0;
  const float* out = got.hidden_states.data_as<float>();
  for (size_t i = 0; i < want.out.size(); ++i) {
    scale = std::max(scale, std::fabs(want.out[i]));
    worst = std::max(worst, std::isnan(out[i]) ? INFINITY : std::fabs(out[i] - want.out[i]));
  }
  c.rel_error = worst / scale;
  for (size_t i = 0; i < want.ids.size(); ++i) {
    c.ids_equal &= got.topk.ids.data_as<int32_t>()[i] == want.ids[i];
    c.weight_error = std::max(c.weight_error, std::fabs(got.topk.weights.data_as<float>()[i] - want.weights[i]) /
                                                  std::max(1e-30, std::fabs(want.weights[i])));
  }
  return c;
}

test::ReferenceResult reference(const MoeCase& c, const test::PaddedOptions* padded = nullptr) {
  return test::moe_reference_f64(c.config, [&](const std::string& n) { return c.weight(n); }, c.x, padded);
}

// NOTE: these tests hold the layer to the fp64 oracle at 1e-5, so they run the reference experts; the fast
// (bf16/int8) experts are checked at their own tolerance in moe_layer_fast_test.cpp.
LayerOutput run(const MoeCase& c, LayerOptions options = {}) {
  options.cpu_experts = CpuExperts::reference;
  const MoeConfig config = parse_moe_config(c.config);
  test::TempDir dir;
  MoeLayer layer(config, test::load_case_weights(c, config, dir.path()), options);
  return layer.forward(c.x);
}

void expect_matches(const LayerOutput& got, const test::ReferenceResult& want, const std::string& what) {
  const Compared c = compare(got, want);
  EXPECT_LE(c.rel_error, 1e-5) << what;
  EXPECT_TRUE(c.ids_equal) << what;
  EXPECT_LE(c.weight_error, 1e-5) << what;
}

TEST(MoeLayer, EveryFamilyMatchesTheFloat64Reference) {
  test::TestRng rng;
  for (const char* type : test::kMoeModelTypes)
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (int trial = 0; trial < 3; ++trial) {
        const MoeCase c = test::random_moe_case(type, rng, {.weight_dtype = dtype, .input_dtype = dtype});
        expect_matches(run(c), reference(c), std::string(type) + " " + std::string(dtype_name(dtype)));
      }
}

TEST(MoeLayer, OddShapes) {
  test::TestRng rng;
  for (const char* type : test::kMoeModelTypes)
    for (int64_t T : {1, 2, 13, 97})
      for (int64_t E : {3, 5, 7, 12}) {
        if (std::string(type).starts_with("deepseek") && E % 2) continue;  // groups need E divisible
        const MoeCase c = test::random_moe_case(type, rng, {.tokens = T, .experts = E});
        const LayerOutput out = run(c);
        expect_matches(out, reference(c), std::string(type) + " T " + std::to_string(T) + " E " + std::to_string(E));
        EXPECT_EQ(out.stats.n_tokens, T);
      }
}

TEST(MoeLayer, PaddedParadigmBothPoliciesMatchTheReference) {
  test::TestRng rng;
  for (const char* type : test::kMoeModelTypes)
    for (double factor : {0.25, 0.5, 1.0, 1.5})
      for (bool renormalize : {false, true}) {
        const MoeCase c = test::random_moe_case(type, rng, {.tokens = 24});
        const test::PaddedOptions padded{.capacity_factor = factor, .renormalize = renormalize};
        const LayerOutput out = run(c, {.paradigm = Paradigm::padded, .capacity_factor = factor,
                                        .overflow = renormalize ? OverflowPolicy::renormalize : OverflowPolicy::drop});
        const test::ReferenceResult want = reference(c, &padded);
        expect_matches(out, want, std::string(type) + " factor " + std::to_string(factor));
        EXPECT_EQ(out.stats.dropped_pairs, want.dropped_pairs);
        EXPECT_EQ(out.stats.capacity, want.capacity);
        EXPECT_EQ(out.stats.dropped_per_expert, want.dropped_per_expert);
      }
}

TEST(MoeLayer, PaddedWithRoomForEveryPairIsBitIdenticalToContiguous) {
  test::TestRng rng;
  const MoeCase c = test::random_moe_case("deepseek_v3", rng, {.tokens = 31});
  const LayerOutput contiguous = run(c);
  const LayerOutput padded = run(c, {.paradigm = Paradigm::padded, .capacity_factor = 1000.0});
  EXPECT_EQ(padded.stats.dropped_pairs, 0);
  EXPECT_EQ(0, std::memcmp(contiguous.hidden_states.data(), padded.hidden_states.data(),
                           contiguous.hidden_states.nbytes()));
}

TEST(MoeLayer, EveryTokenOnOneExpert) {
  // A router whose row 2 dominates: every token's first choice is expert 2; with k = 1 the others are dead.
  test::TestRng rng;
  MoeCase c = test::random_moe_case("qwen3_moe", rng, {.tokens = 17, .experts = 6, .top_k = 1});
  const int64_t H = c.x.size(1);
  for (auto& [name, t] : c.weights)
    if (name == "gate.weight") {
      t = Tensor::zeros(DType::F32, {6, H});
      for (int64_t h = 0; h < H; ++h) t.data_as<float>()[2 * H + h] = 1.0f;
    }
  Tensor x = Tensor::empty(DType::F32, {17, H});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::fabs(rng.normal()) + 0.1f;
  c.x = x;
  const LayerOutput out = run(c);
  expect_matches(out, reference(c), "all on expert 2");
  EXPECT_EQ(out.stats.tokens_per_expert[2], 17);
  EXPECT_EQ(out.stats.dead_experts.size(), 5u);
  const LayerOutput padded = run(c, {.paradigm = Paradigm::padded, .capacity_factor = 1.0});
  EXPECT_EQ(padded.stats.capacity, 3);  // ceil(17 / 6)
  EXPECT_EQ(padded.stats.dropped_pairs, 14);
}

TEST(MoeLayer, BadInputsAreNamed) {
  test::TestRng rng;
  const MoeCase c = test::random_moe_case("mixtral", rng, {.tokens = 3});
  const MoeConfig config = parse_moe_config(c.config);
  test::TempDir dir;
  MoeLayer layer(config, test::load_case_weights(c, config, dir.path()));
  Tensor nan_x = c.x.to_f32();
  nan_x.data_as<float>()[4] = NAN;
  EXPECT_THROW(
      {
        try {
          layer.forward(nan_x);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos);
          throw;
        }
      },
      Error);
  EXPECT_THROW(layer.forward(rng.normal_tensor({3, config.hidden_size + 1})), Error);
  EXPECT_THROW(layer.forward(rng.normal_tensor({config.hidden_size})), Error);
  EXPECT_THROW(MoeLayer(config, test::load_case_weights(c, config, dir.path()),
                        {.paradigm = Paradigm::padded, .capacity_factor = -1.0}),
               Error);
}

}  // namespace
}  // namespace moe
