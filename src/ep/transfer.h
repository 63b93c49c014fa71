#pragma once
// Wire formats of the token rows that dispatch sends: fp32 (exact), bf16, or fp8 e4m3 with one fp32 scale
// per block of 128 values (scale = amax / 448; values clamped to ±448 before rounding).

#include <cstdint>
#include <span>
#include <string_view>

namespace moe::ep {

enum class Transfer : uint8_t { f32, bf16, fp8 };

inline constexpr int64_t kFp8Block = 128;

std::string_view transfer_name(Transfer transfer);
// "f32" | "bf16" | "fp8"; throws moe::Error naming the choices otherwise.
Transfer parse_transfer(std::string_view name);

// The wire formats of one expert-parallel exchange: token rows out (dispatch) and each copy's partial sum
// back (combine). The CPU path's combine is always f32; the GPU path's dispatch bf16 or fp8, combine bf16
// or f32.
struct EpWires {
  Transfer dispatch = Transfer::bf16;
  Transfer combine = Transfer::bf16;
};

// Bytes of one row of `hidden` values (fp8: hidden bytes + 4 per block of 128).
int64_t transfer_row_bytes(Transfer transfer, int64_t hidden);
// row [hidden] F32 -> dst [transfer_row_bytes].
void encode_row(Transfer transfer, std::span<const float> row, uint8_t* dst);
// src [transfer_row_bytes] -> row [hidden] F32.
void decode_row(Transfer transfer, const uint8_t* src, std::span<float> row);

}  // namespace moe::ep
