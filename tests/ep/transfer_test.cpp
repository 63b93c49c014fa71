// Wire formats of dispatch: fp32 exact, bf16 and fp8 e4m3 (one scale per 128 values) within their rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ep/transfer.h"
#include "test_random.h"

namespace moe::ep {
namespace {

std::vector<float> round_trip(Transfer transfer, const std::vector<float>& row) {
  std::vector<uint8_t> wire(transfer_row_bytes(transfer, static_cast<int64_t>(row.size())), 0xA5);
  encode_row(transfer, row, wire.data());
  std::vector<float> back(row.size(), std::nanf(""));
  decode_row(transfer, wire.data(), back);
  return back;
}

TEST(Transfer, RowBytes) {
  EXPECT_EQ(transfer_row_bytes(Transfer::f32, 7168), 7168 * 4);
  EXPECT_EQ(transfer_row_bytes(Transfer::bf16, 7168), 7168 * 2);
  EXPECT_EQ(transfer_row_bytes(Transfer::fp8, 7168), 7168 + 56 * 4);
  EXPECT_EQ(transfer_row_bytes(Transfer::fp8, 130), 130 + 2 * 4);  // a short last block
}

TEST(Transfer, RoundTripWithinRounding) {
  test::TestRng rng;
  for (int64_t H : {1, 127, 128, 300}) {
    std::vector<float> row = rng.normal_vector(H, 3.0f);
    row[0] = 1e4f;  // a large value: fp8 must scale, never saturate to NaN
    if (H > 200) std::fill(row.begin() + 128, row.begin() + 256, 0.0f);  // an all-zero block
    EXPECT_EQ(round_trip(Transfer::f32, row), row);
    const std::vector<float> b = round_trip(Transfer::bf16, row), f = round_trip(Transfer::fp8, row);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t block = h / kFp8Block * kFp8Block;
      float amax = 0;
      for (int64_t i = block; i < std::min(H, block + kFp8Block); ++i) amax = std::max(amax, std::fabs(row[i]));
      EXPECT_NEAR(b[h], row[h], std::fabs(row[h]) / 256) << h;
      // e4m3: half an ulp is 1/16 relative for normals; values far below the block's max fall into
      // subnormals, whose step is amax / 448 · 2^-9.
      EXPECT_NEAR(f[h], row[h], std::fabs(row[h]) / 16 + amax / 448 / 512) << h;
    }
  }
}

TEST(Transfer, ParseNames) {
  EXPECT_EQ(parse_transfer("fp8"), Transfer::fp8);
  EXPECT_THROW(parse_transfer("int4"), Error);
}

}  // namespace
}  // namespace moe::ep
