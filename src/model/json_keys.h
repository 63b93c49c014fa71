#pragma once
// Typed reads of config.json keys for the model loader: a missing key (or an explicit null) gives the
// fallback; a key of the wrong type is a moe::Error naming it. (layer/moe_config.cpp keeps its own copy
// for the MoE keys: it sits below model/ and exposes no JSON helpers.)

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "moe/core/check.h"

namespace moe::model::json_keys {

using nlohmann::json;

inline const json* find(const json& c, const char* key) {
  const auto it = c.find(key);
  return it == c.end() || it->is_null() ? nullptr : &*it;
}

inline int64_t get_int(const json& c, const char* key, std::optional<int64_t> fallback) {
  const json* v = find(c, key);
  if (!v) {
    MOE_CHECK(fallback.has_value(), "config.json lacks '{}', which this model_type needs", key);
    return *fallback;
  }
  // NOTE: an integral float (8.0) is accepted within +-2^53; converting a larger one (1e300) to an integer
  // would be undefined behaviour.
  const bool integral = v->is_number_integer() || (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                                                   std::fabs(v->get<double>()) <= 9007199254740992.0);
  MOE_CHECK(integral, "config.json key '{}' must be an integer, got {}", key, v->dump());
  MOE_CHECK(!v->is_number_unsigned() || v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
            "config.json key '{}' = {} is out of range", key, v->dump());
  return v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(v->get<double>());
}

// Sizes from config.json (vocabulary, heads, head dims, positions) are bounded before anything is allocated
// or multiplied with them: 2^24 is far above any model's, and a product of two bounded sizes fits int64.
inline constexpr int64_t kMaxConfigSize = int64_t{1} << 24;

inline int64_t get_size(const json& c, const char* key, std::optional<int64_t> fallback) {
  const int64_t v = get_int(c, key, fallback);
  MOE_CHECK(v <= kMaxConfigSize, "config.json key '{}' = {} is out of range (at most {})", key, v, kMaxConfigSize);
  return v;
}

inline double get_double(const json& c, const char* key, double fallback) {
  const json* v = find(c, key);
  if (!v) return fallback;
  MOE_CHECK(v->is_number(), "config.json key '{}' must be a number, got {}", key, v->dump());
  return v->get<double>();
}

inline bool get_bool(const json& c, const char* key, bool fallback) {
  const json* v = find(c, key);
  if (!v) return fallback;
  MOE_CHECK(v->is_boolean(), "config.json key '{}' must be true or false, got {}", key, v->dump());
  return v->get<bool>();
}

inline std::string get_string(const json& c, const char* key, const std::string& fallback) {
  const json* v = find(c, key);
  if (!v) return fallback;
  MOE_CHECK(v->is_string(), "config.json key '{}' must be a string, got {}", key, v->dump());
  return v->get<std::string>();
}

}  // namespace moe::model::json_keys
