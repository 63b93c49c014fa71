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
  const bool integral = v->is_number_integer() || (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>());
  MOE_CHECK(integral, "config.json key '{}' must be an integer, got {}", key, v->dump());
  return v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(v->get<double>());
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
