#include "moe/quant/quant_scheme.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "moe/core/check.h"

namespace moe::quant {

namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string string_key(const json& q, const char* key, const char* fallback) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return fallback;
  MOE_CHECK(it->is_string(), "config.json quantization_config.{} must be a string, got {}", key, it->dump());
  return it->get<std::string>();
}

int64_t positive_key(const json& q, const char* key, int64_t fallback) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return fallback;
  MOE_CHECK(it->is_number_integer() && it->get<int64_t>() > 0,
            "config.json quantization_config.{} must be a positive integer, got {}", key, it->dump());
  return it->get<int64_t>();
}

std::vector<std::string> string_list(const json& q, const char* key) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return {};
  MOE_CHECK(it->is_array() && std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_string(); }),
            "config.json quantization_config.{} must be a list of module names, got {}", key, it->dump());
  return it->get<std::vector<std::string>>();
}

QuantScheme parse_fp8(const json& q) {
  QuantScheme s;
  s.method = QuantMethod::fp8_block;
  const std::string fmt = string_key(q, "fmt", "e4m3");
  MOE_CHECK(fmt == "e4m3", "config.json quantization_config.fmt '{}' is not supported: fp8 weights are e4m3", fmt);
  const std::string activations = string_key(q, "activation_scheme", "dynamic");
  MOE_CHECK(activations == "dynamic", "config.json quantization_config.activation_scheme '{}' is not supported: "
            "use 'dynamic' (per-token, per-128 activation scales computed on the fly)", activations);
  if (const auto it = q.find("weight_block_size"); it != q.end() && !it->is_null()) {
    MOE_CHECK(it->is_array() && it->size() == 2 && (*it)[0].is_number_integer() && (*it)[1].is_number_integer() &&
                  (*it)[0].get<int64_t>() > 0 && (*it)[1].get<int64_t>() > 0,
              "config.json quantization_config.weight_block_size must be two positive sizes [n, k], got {} "
              "(per-tensor fp8 scales are not supported)", it->dump());
    s.fp8_block = {.n = (*it)[0].get<int64_t>(), .k = (*it)[1].get<int64_t>()};
  } else {
    MOE_FAIL("config.json quantization_config has no weight_block_size: block-scaled fp8 needs it (e.g. [128, 128]); "
             "per-tensor fp8 scales are not supported");
  }
  s.modules_to_not_convert = string_list(q, "modules_to_not_convert");
  return s;
}

QuantScheme parse_awq(const json& q) {
  QuantScheme s;
  s.method = QuantMethod::awq_int4;
  const int64_t bits = positive_key(q, "bits", positive_key(q, "w_bit", 4));
  MOE_CHECK(bits == 4, "config.json quantization_config.bits {} is not supported: awq weights are 4-bit", bits);
  s.group_size = positive_key(q, "group_size", positive_key(q, "q_group_size", 128));
  const std::string version = lower(string_key(q, "version", "gemm"));
  MOE_CHECK(version == "gemm", "config.json quantization_config.version '{}' is not supported: awq checkpoints are "
            "read in the GEMM layout", version);
  const auto zero = q.find("zero_point");
  MOE_CHECK(zero == q.end() || zero->is_null() || (zero->is_boolean() && zero->get<bool>()),
            "config.json quantization_config.zero_point {} is not supported: awq GEMM weights have zero points",
            zero == q.end() ? "" : zero->dump());
  s.modules_to_not_convert = string_list(q, "modules_to_not_convert");
  return s;
}

}  // namespace

std::string_view quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::none: return "none";
    case QuantMethod::fp8_block: return "fp8";
    case QuantMethod::awq_int4: return "int4";
  }
  return "?";
}

QuantScheme parse_quant_scheme(const json& hf_config) {
  const auto it = hf_config.find("quantization_config");
  if (it == hf_config.end() || it->is_null()) return {};
  MOE_CHECK(it->is_object(), "config.json quantization_config must be an object, got {}", it->dump());
  const std::string method = lower(string_key(*it, "quant_method", ""));
  if (method == "fp8") return parse_fp8(*it);
  if (method == "awq") return parse_awq(*it);
  MOE_FAIL("config.json quantization_config.quant_method '{}' is not supported: this engine loads 'fp8' (e4m3, "
           "block-scaled) and 'awq' (int4, GEMM layout)", method);
}

json quant_scheme_json(const QuantScheme& s) {
  json q;
  switch (s.method) {
    case QuantMethod::none: return nullptr;
    case QuantMethod::fp8_block:
      q = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
           {"weight_block_size", {s.fp8_block.n, s.fp8_block.k}}};
      break;
    case QuantMethod::awq_int4:
      q = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", s.group_size}, {"zero_point", true},
           {"version", "gemm"}};
      break;
  }
  q["modules_to_not_convert"] = s.modules_to_not_convert;
  return q;
}

}  // namespace moe::quant
