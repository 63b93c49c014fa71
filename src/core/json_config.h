#pragma once
// Typed reads of a HuggingFace config.json object, the one reader behind the MoE config (layer/) and the
// model config (model/): a missing key (or an explicit null) gives the fallback; a key of the wrong type or
// out of range is a moe::Error naming it. It sits in core/ because both of its users do, one above the other.

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>

#include "moe/core/check.h"

namespace moe::json_config {

using nlohmann::json;

// Sizes from config.json (hidden and intermediate sizes, vocabulary, heads, head dims, positions) are bounded
// before anything is allocated or multiplied with them: 2^24 is far above any model's (DeepSeek-V3: hidden
// 7168), and a product of two bounded sizes fits int64.
inline constexpr int64_t kMaxConfigSize = int64_t{1} << 24;

// The value of `key`, or null when it is missing or null.
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
  // NOTE: an integral float (8.0, as some exporters write) is accepted within +-2^53, where doubles are exact;
  // converting a larger one (1e300) to an integer would be undefined behaviour.
  const bool integral = v->is_number_integer() || (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                                                   std::fabs(v->get<double>()) <= 9007199254740992.0);
  MOE_CHECK(integral, "config.json key '{}' must be an integer, got {}", key, v->dump());
  MOE_CHECK(!v->is_number_unsigned() || v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
            "config.json key '{}' = {} is out of range", key, v->dump());
  return v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(v->get<double>());
}

// The spelling of a key with aliases that the file uses (the first present), for messages; the first when
// none is.
inline const char* given_key(const json& c, std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    if (find(c, key)) return key;
  return *keys.begin();
}

// The first of several spellings that is present (transformers' attribute_map aliases); errors and the
// fallback go by the first spelling.
inline int64_t get_int_any(const json& c, std::initializer_list<const char*> keys, std::optional<int64_t> fallback) {
  for (const char* key : keys)
    if (find(c, key)) return get_int(c, key, std::nullopt);
  return get_int(c, *keys.begin(), fallback);
}

// A size of the model: an integer of at most kMaxConfigSize.
inline int64_t get_size_any(const json& c, std::initializer_list<const char*> keys, std::optional<int64_t> fallback) {
  const int64_t v = get_int_any(c, keys, fallback);
  MOE_CHECK(v <= kMaxConfigSize, "config.json key '{}' = {} is out of range (at most {})", given_key(c, keys), v,
            kMaxConfigSize);
  return v;
}

inline int64_t get_size(const json& c, const char* key, std::optional<int64_t> fallback) {
  return get_size_any(c, {key}, fallback);
}

inline double get_double(const json& c, const char* key, double fallback) {
  const json* v = find(c, key);
  if (!v) return fallback;
  MOE_CHECK(v->is_number(), "config.json key '{}' must be a number, got {}", key, v->dump());
  return v->get<double>();
}

// A float32 setting: a double beyond float's range (converting it would be undefined behaviour) is an error.
inline float get_float32(const json& c, const char* key, double fallback) {
  const double v = get_double(c, key, fallback);
  MOE_CHECK(std::fabs(v) <= std::numeric_limits<float>::max(), "config.json key '{}' = {} is out of float range",
            key, v);
  return static_cast<float>(v);
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

}  // namespace moe::json_config
