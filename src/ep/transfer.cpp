#include "ep/transfer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moe/core/check.h"
#include "core/float_convert.h"

namespace moe::ep {

namespace {

constexpr float kFp8Max = 448.0f;

int64_t n_blocks(int64_t hidden) { return (hidden + kFp8Block - 1) / kFp8Block; }

}  // namespace

std::string_view transfer_name(Transfer transfer) {
  switch (transfer) {
    case Transfer::f32: return "f32";
    case Transfer::bf16: return "bf16";
    case Transfer::fp8: return "fp8";
  }
  return "?";
}

Transfer parse_transfer(std::string_view name) {
  if (name == "f32") return Transfer::f32;
  if (name == "bf16") return Transfer::bf16;
  if (name == "fp8") return Transfer::fp8;
  MOE_FAIL("unknown transfer format '{}': use f32 (exact), bf16 or fp8 (e4m3, one scale per 128 values)", name);
}

int64_t transfer_row_bytes(Transfer transfer, int64_t hidden) {
  switch (transfer) {
    case Transfer::f32: return hidden * 4;
    case Transfer::bf16: return hidden * 2;
    case Transfer::fp8: return hidden + 4 * n_blocks(hidden);  // [hidden] e4m3, then [blocks] fp32 scales
  }
  return 0;
}

void encode_row(Transfer transfer, std::span<const float> row, uint8_t* dst) {
  const int64_t H = static_cast<int64_t>(row.size());
  if (transfer == Transfer::f32) {
    std::memcpy(dst, row.data(), row.size_bytes());
  } else if (transfer == Transfer::bf16) {
    for (int64_t h = 0; h < H; ++h) {
      const uint16_t bits = f32_to_bf16(row[h]);
      std::memcpy(dst + 2 * h, &bits, 2);
    }
  } else {
    uint8_t* scales = dst + H;
    for (int64_t b = 0; b < n_blocks(H); ++b) {
      const int64_t h0 = b * kFp8Block, h1 = std::min(H, h0 + kFp8Block);
      float amax = 0.0f;
      for (int64_t h = h0; h < h1; ++h) amax = std::max(amax, std::fabs(row[h]));
      // NOTE: an all-zero block keeps scale 1 so that decoding never divides by zero.
      const float scale = amax > 0.0f ? amax / kFp8Max : 1.0f;
      for (int64_t h = h0; h < h1; ++h)
        dst[h] = f32_to_fp8_e4m3(std::clamp(row[h] / scale, -kFp8Max, kFp8Max));
      std::memcpy(scales + 4 * b, &scale, 4);
    }
  }
}

void decode_row(Transfer transfer, const uint8_t* src, std::span<float> row) {
  const int64_t H = static_cast<int64_t>(row.size());
  if (transfer == Transfer::f32) {
    std::memcpy(row.data(), src, row.size_bytes());
  } else if (transfer == Transfer::bf16) {
    for (int64_t h = 0; h < H; ++h) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * h, 2);
      row[h] = bf16_to_f32(bits);
    }
  } else {
    const uint8_t* scales = src + H;
    for (int64_t b = 0; b < n_blocks(H); ++b) {
      float scale;
      std::memcpy(&scale, scales + 4 * b, 4);
      const int64_t h0 = b * kFp8Block, h1 = std::min(H, h0 + kFp8Block);
      for (int64_t h = h0; h < h1; ++h) row[h] = fp8_e4m3_to_f32(src[h]) * scale;
    }
  }
}

}  // namespace moe::ep
