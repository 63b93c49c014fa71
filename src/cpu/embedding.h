#pragma once
// Embedding rows on the CPU, and the row gather the decoder's last_only output uses.

#include <cstdint>
#include <span>

#include "moe/core/tensor.h"

namespace moe::cpu {

// Rows `ids` of an embedding table [V, H] (any float dtype) -> [n, H] F32; an id outside [0, V) is a
// moe::Error naming it.
Tensor embedding(const Tensor& table, std::span<const int32_t> ids);

// Rows `rows` of x [T, H] F32 -> [n, H] F32 (each row in [0, T)).
Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows);

}  // namespace moe::cpu
