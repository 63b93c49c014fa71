#include "moe/core/dtype.h"

#include <array>
#include <utility>

namespace moe {

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 8> kNames{{
    {DType::F32, "F32"},
    {DType::BF16, "BF16"},
    {DType::F16, "F16"},
    {DType::F8_E4M3, "F8_E4M3"},
    {DType::I8, "I8"},
    {DType::U8, "U8"},
    {DType::I32, "I32"},
    {DType::I64, "I64"},
}};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& [type, name] : kNames)
    if (type == t) return name;
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& [type, spelling] : kNames)
    if (spelling == name) return type;
  return std::nullopt;
}

}  // namespace moe
