#include "core/float_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "moe/core/check.h"
#include "test_random.h"

namespace moe {
namespace {

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t to_bits(float value) { return std::bit_cast<uint32_t>(value); }

// An independent oracle for round-to-nearest-even: the non-negative finite values of a format, sorted, plus
// one past the largest (the next value the exponent range would give), which is where overflow goes.
struct Grid {
  std::vector<double> values;
  std::vector<uint32_t> patterns;
  uint32_t sign_bit;

  // The pattern |x| rounds to (ties to the even pattern), with x's sign.
  uint32_t round(float x) const {
    const double a = std::fabs(double{x});
    const auto it = std::lower_bound(values.begin(), values.end(), a);
    uint32_t pattern;
    if (it == values.end()) {
      pattern = patterns.back();
    } else if (*it == a || it == values.begin()) {
      pattern = patterns[it - values.begin()];
    } else {
      const size_t hi = it - values.begin(), lo = hi - 1;
      const double d_lo = a - values[lo], d_hi = values[hi] - a;
      if (d_lo < d_hi) pattern = patterns[lo];
      else if (d_hi < d_lo) pattern = patterns[hi];
      else pattern = (patterns[lo] & 1) == 0 ? patterns[lo] : patterns[hi];
    }
    return std::signbit(x) ? pattern | sign_bit : pattern;
  }
};

// bf16 and f16: every non-negative finite pattern in order, then +inf valued at 2^(emax + 1).
Grid ieee_grid(int exponent_bits, int mantissa_bits, float (*decode)(uint16_t)) {
  Grid grid;
  const uint32_t inf = ((1u << exponent_bits) - 1) << mantissa_bits;
  for (uint32_t p = 0; p < inf; ++p) {
    grid.values.push_back(decode(static_cast<uint16_t>(p)));
    grid.patterns.push_back(p);
  }
  grid.values.push_back(std::ldexp(1.0, (1 << (exponent_bits - 1))));
  grid.patterns.push_back(inf);
  grid.sign_bit = 1u << (exponent_bits + mantissa_bits);
  return grid;
}

// e4m3fn: 0x00..0x7e, then the NaN slot 0x7f valued at 480 (what PyTorch rounds into).
Grid fp8_grid() {
  Grid grid;
  for (uint32_t p = 0; p < 0x7f; ++p) {
    grid.values.push_back(fp8_e4m3_to_f32(static_cast<uint8_t>(p)));
    grid.patterns.push_back(p);
  }
  grid.values.push_back(480.0);
  grid.patterns.push_back(0x7f);
  grid.sign_bit = 0x80;
  return grid;
}

// Checks `encode` against the grid at every representable value, every midpoint (a tie), one float ulp
// either side of each midpoint, and random floats near the grid.
template <class Encode>
void check_against_grid(const Grid& grid, Encode encode, const char* format) {
  SCOPED_TRACE(format);
  int failures = 0;
  auto check = [&](float x) {
    const uint32_t want = grid.round(x);
    const uint32_t got = encode(x);
    if (got != want && ++failures <= 10)
      ADD_FAILURE() << format << "(" << x << " = 0x" << std::hex << to_bits(x) << ") = 0x" << got << ", want 0x"
                    << want;
  };
  for (size_t i = 0; i + 1 < grid.values.size(); ++i) {
    const auto lo = static_cast<float>(grid.values[i]);
    const auto mid = static_cast<float>((grid.values[i] + grid.values[i + 1]) / 2);
    ASSERT_EQ(double{mid}, (grid.values[i] + grid.values[i + 1]) / 2) << "midpoint not exact in f32";
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      check(x);
      check(-x);
    }
  }
  test::TestRng rng;
  const double top = grid.values.back() * 1.5;
  for (int i = 0; i < 200000; ++i) {
    // Log-uniform magnitudes over the format's range and a bit beyond.
    const double magnitude = std::exp(std::uniform_real_distribution<double>(std::log(grid.values[1] / 4), std::log(top))(rng.engine()));
    const auto x = static_cast<float>(i % 2 ? -magnitude : magnitude);
    check(x);
  }
  EXPECT_EQ(failures, 0);
}

TEST(Bf16, ExactValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie, 0x3f80 is even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie, 0x3f82 is even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fff)), 0x3f80);  // just below
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf818000)), 0xbf82);  // sign is symmetric
  EXPECT_EQ(f32_to_bf16(from_bits(0x0000ffff)), 0x0001);  // f32 subnormal rounds up into bf16 subnormal
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000)), 0x0000);  // subnormal tie to even zero
}

TEST(Bf16, NaNStaysNaN) {
  // 0x7f800001 would truncate to inf: the conversion must keep it a NaN.
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xffc00000u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = f32_to_bf16(from_bits(bits));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << bits << " -> " << b;
    EXPECT_EQ(b & 0x8000, (bits >> 16) & 0x8000) << "sign of NaN";
  }
}

TEST(Bf16, OverflowRoundsToInf) {
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f7fff)), 0x7f7f);  // below the tie: the largest finite bf16
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f8000)), 0x7f80);  // tie between odd 0x7f7f and inf: inf
}

TEST(Bf16, AllPatternsRoundTrip) {
  int nans = 0;
  for (uint32_t p = 0; p < 0x10000; ++p) {
    const auto bits = static_cast<uint16_t>(p);
    const float value = bf16_to_f32(bits);
    if (std::isnan(value)) {
      ++nans;
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(value))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(value), bits) << "pattern 0x" << std::hex << p;
  }
  EXPECT_EQ(nans, 2 * 127);
}

TEST(Bf16, MatchesRoundToNearestEvenOracle) {
  check_against_grid(ieee_grid(8, 7, bf16_to_f32), f32_to_bf16, "bf16");
}

TEST(F16, ExactValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // largest finite, exact
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
}

TEST(F16, Subnormals) {
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);          // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);          // tie with zero: even zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);  // just above the tie
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 units: tie, 2 is even
  EXPECT_EQ(f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);          // 2.5 units: tie, 2 is even
  EXPECT_EQ(f32_to_f16(-std::ldexp(1023.0f, -24)), 0x83ff);      // largest subnormal, negative
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);       // rounds up into the smallest normal
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
}

TEST(F16, OverflowToInf) {
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);  // below the tie between 65504 and 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);    // the tie: odd 0x7bff loses to inf
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}

TEST(F16, NaNStaysNaN) {
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7f802000u}) {
    const uint16_t h = f32_to_f16(from_bits(bits));
    EXPECT_TRUE(std::isnan(f16_to_f32(h))) << std::hex << bits << " -> " << h;
  }
}

TEST(F16, AllPatternsRoundTrip) {
  int nans = 0;
  for (uint32_t p = 0; p < 0x10000; ++p) {
    const auto bits = static_cast<uint16_t>(p);
    const float value = f16_to_f32(bits);
    if (std::isnan(value)) {
      ++nans;
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(value))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(value), bits) << "pattern 0x" << std::hex << p;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(F16, MatchesRoundToNearestEvenOracle) {
  check_against_grid(ieee_grid(5, 10, f16_to_f32), f32_to_f16, "f16");
}

TEST(Fp8E4M3, AllPatternsRoundTrip) {
  for (uint32_t p = 0; p < 0x100; ++p) {
    const auto bits = static_cast<uint8_t>(p);
    const float value = fp8_e4m3_to_f32(bits);
    EXPECT_EQ((p & 0x7f) == 0x7f, std::isnan(value)) << "pattern 0x" << std::hex << p;
    EXPECT_EQ(f32_to_fp8_e4m3(value), bits) << "pattern 0x" << std::hex << p << " value " << value;
  }
}

TEST(Fp8E4M3, Values) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-448.0f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);  // tie between 1 and 1.125: even 0x38
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25: even 0x3a
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
}

TEST(Fp8E4M3, Saturation) {
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7e);   // tie between 448 (even) and the NaN slot: 448
  EXPECT_EQ(f32_to_fp8_e4m3(-464.0f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(463.9f), 0x7e);
  // As in PyTorch: above the tie the value rounds into the 480 slot, which is NaN.
  EXPECT_EQ(f32_to_fp8_e4m3(470.0f), 0x7f);
  for (float x : {480.0f, 481.0f, 1e4f, 1e30f, INFINITY, std::nanf("")}) {
    EXPECT_EQ(f32_to_fp8_e4m3(x), 0x7f) << x;
    EXPECT_EQ(f32_to_fp8_e4m3(-x), 0xff) << -x;
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(x))));
  }
}

TEST(Fp8E4M3, Subnormals) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), std::ldexp(7.0f, -9));
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie with zero: even zero
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.01f, -10)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 units: tie, even 2
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(15.0f, -10)), 0x08); // 7.5 units: tie into the smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(-std::ldexp(5.0f, -9)), 0x85);
  EXPECT_EQ(f32_to_fp8_e4m3(1e-10f), 0x00);
}

TEST(Fp8E4M3, MatchesRoundToNearestEvenOracle) { check_against_grid(fp8_grid(), f32_to_fp8_e4m3, "fp8_e4m3"); }

TEST(BulkConvert, MatchesScalarConversions) {
  test::TestRng rng;
  const std::vector<float> src = rng.normal_vector(1000, 8.0f);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    std::vector<unsigned char> narrow(src.size() * dtype_size(dtype), 0xA5);
    convert_from_f32(src.data(), narrow.data(), dtype, src.size());
    std::vector<float> back(src.size(), -12345.0f);
    convert_to_f32(narrow.data(), dtype, back.data(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      float want = src[i];
      if (dtype == DType::BF16) want = bf16_to_f32(f32_to_bf16(src[i]));
      if (dtype == DType::F16) want = f16_to_f32(f32_to_f16(src[i]));
      if (dtype == DType::F8_E4M3) want = fp8_e4m3_to_f32(f32_to_fp8_e4m3(src[i]));
      ASSERT_EQ(back[i], want) << "element " << i;
    }
  }
}

TEST(BulkConvert, RejectsIntegerDTypes) {
  float value = 1.0f;
  int32_t out = 0;
  try {
    convert_from_f32(&value, &out, DType::I32, 1);
    FAIL() << "expected moe::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a float dtype"), std::string::npos) << e.what();
  }
  EXPECT_THROW(convert_to_f32(&out, DType::U8, &value, 1), Error);
}

// The sum of w's bf16 terms, in double (exact: three terms of 8 significant bits).
double sum_of_terms(const std::vector<uint16_t>& terms, int n_terms, size_t n, size_t i) {
  double sum = 0;
  for (int j = 0; j < n_terms; ++j) sum += bf16_to_f32(terms[j * n + i]);
  return sum;
}

TEST(SplitBf16Terms, AnyFloatIsTheExactSumOfAtMostThreeTerms) {
  test::TestRng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  // Random bit patterns over every exponent (finite only), plus edges: the largest float (whose bf16 is
  // inf), the smallest normal, subnormals, signed zeros.
  std::vector<float> w = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(), 0x1.234566p-127f, 0.0f, -0.0f, 1.0f + 0x1.0p-9f + 0x1.0p-23f};
  while (w.size() < 20000) {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(rng.uniform_int(0, 0xffffffff)));
    if (std::isfinite(v)) w.push_back(v);
  }
  std::vector<uint16_t> terms;
  const int n_terms = split_bf16_terms(w.data(), w.size(), terms);
  EXPECT_EQ(n_terms, 3);
  ASSERT_EQ(terms.size(), 3 * w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    // Residuals below bf16's smallest subnormal (2^-133) are the only loss.
    ASSERT_NEAR(sum_of_terms(terms, n_terms, w.size(), i), double{w[i]}, 0x1.0p-133) << "w = " << w[i];
    if (std::abs(w[i]) >= 0x1.0p-100f) {
      ASSERT_EQ(sum_of_terms(terms, n_terms, w.size(), i), double{w[i]}) << "w = " << w[i];
    }
  }
}

TEST(SplitBf16Terms, TakesOnlyTheTermsTheValuesNeed) {
  std::vector<uint16_t> terms;
  const std::vector<float> bf16_exact = {1.0f, -0.5f, 3.0f, bf16_to_f32(0x4049), 0.0f};
  EXPECT_EQ(split_bf16_terms(bf16_exact.data(), bf16_exact.size(), terms), 1);
  EXPECT_EQ(terms.size(), bf16_exact.size());
  for (size_t i = 0; i < bf16_exact.size(); ++i) EXPECT_EQ(bf16_to_f32(terms[i]), bf16_exact[i]);
  const std::vector<float> sixteen_bits = {1.0f + 0x1.0p-12f, 2.0f};  // 13 significant bits
  EXPECT_EQ(split_bf16_terms(sixteen_bits.data(), sixteen_bits.size(), terms), 2);
  EXPECT_EQ(sum_of_terms(terms, 2, 2, 0), double{sixteen_bits[0]});
  const std::vector<float> full = {2.0f, 1.0f + 0x1.0p-9f + 0x1.0p-23f};
  EXPECT_EQ(split_bf16_terms(full.data(), full.size(), terms), 3);
  EXPECT_EQ(sum_of_terms(terms, 3, 2, 1), double{full[1]});
  // Below bf16's smallest subnormal (2^-133) nothing is left to take: no extra terms of zeros.
  const std::vector<float> tiny = {1.0f, std::numeric_limits<float>::denorm_min(), 0x1.0p-130f + 0x1.0p-140f};
  EXPECT_EQ(split_bf16_terms(tiny.data(), tiny.size(), terms), 1);
  EXPECT_EQ(split_bf16_terms(nullptr, 0, terms), 0);
  EXPECT_TRUE(terms.empty());
}

TEST(SplitBf16Terms, NonFiniteValuesAreTheirFirstTerm) {
  const std::vector<float> w = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), 1.0f + 0x1.0p-9f + 0x1.0p-23f};
  std::vector<uint16_t> terms;
  ASSERT_EQ(split_bf16_terms(w.data(), w.size(), terms), 3);
  EXPECT_EQ(bf16_to_f32(terms[0]), w[0]);
  EXPECT_EQ(bf16_to_f32(terms[1]), w[1]);
  EXPECT_TRUE(std::isnan(bf16_to_f32(terms[2])));
  for (int j = 1; j < 3; ++j) {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(terms[j * w.size() + i], 0) << "term " << j << " of value " << i;
  }
}

}  // namespace
}  // namespace moe
