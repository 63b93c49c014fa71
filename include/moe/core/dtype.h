#pragma once
// Element types of tensors, with the names safetensors uses for them.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace moe {

enum class DType : uint8_t { F32, BF16, F16, F8_E4M3, I8, U8, I32, I64 };

// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F8_E4M3: return 1;
    case DType::I8: return 1;
    case DType::U8: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F8_E4M3;
}

// The safetensors spelling: "F32", "BF16", "F16", "F8_E4M3", "I8", "U8", "I32", "I64".
std::string_view dtype_name(DType t);
// Inverse of dtype_name; nullopt for a name this engine does not handle.
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace moe
