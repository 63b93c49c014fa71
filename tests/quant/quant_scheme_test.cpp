// quantization_config as a QuantScheme: the keys of real checkpoints, and errors that name the key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moe/quant/quant_scheme.h"

namespace moe::quant {
namespace {

using nlohmann::json;

std::string error_of(const json& config) {
  try {
    parse_quant_scheme(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantScheme, ReadsDeepSeekV3Fp8) {
  // As DeepSeek-V3's config.json writes it.
  const json c = json::parse(R"({"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                 "quant_method": "fp8", "weight_block_size": [128, 64]}})");
  const QuantScheme s = parse_quant_scheme(c);
  EXPECT_EQ(s.method, QuantMethod::fp8_block);
  EXPECT_EQ(s.fp8_block.n, 128);
  EXPECT_EQ(s.fp8_block.k, 64);
  EXPECT_EQ(parse_quant_scheme(json{{"quantization_config", quant_scheme_json(s)}}).fp8_block.k, 64);
}

TEST(QuantScheme, ReadsAutoAwqGemm) {
  const json c = json::parse(R"({"quantization_config": {"bits": 4, "group_size": 64, "quant_method": "awq",
                                 "version": "GEMM", "zero_point": true, "modules_to_not_convert": ["gate"]}})");
  const QuantScheme s = parse_quant_scheme(c);
  EXPECT_EQ(s.method, QuantMethod::awq_int4);
  EXPECT_EQ(s.group_size, 64);
  EXPECT_EQ(s.modules_to_not_convert, std::vector<std::string>{"gate"});
  const QuantScheme back = parse_quant_scheme(json{{"quantization_config", quant_scheme_json(s)}});
  EXPECT_EQ(back.method, QuantMethod::awq_int4);
  EXPECT_EQ(back.group_size, 64);
}

TEST(QuantScheme, NoneWhenAbsent) {
  EXPECT_EQ(parse_quant_scheme(json::object()).method, QuantMethod::none);
  EXPECT_EQ(parse_quant_scheme(json{{"quantization_config", nullptr}}).method, QuantMethod::none);
  EXPECT_TRUE(quant_scheme_json({}).is_null());
}

TEST(QuantScheme, UnsupportedValuesNameTheKey) {
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "gptq"}})")).find("'gptq' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}})"))
                .find("weight_block_size"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "fp8"}})")).find("weight_block_size"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "static",
                                     "weight_block_size": [128, 128]}})")).find("activation_scheme"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "fp8", "fmt": "e5m2",
                                     "weight_block_size": [128, 128]}})")).find("fmt"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "awq", "bits": 8}})")).find("bits 8"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "awq", "version": "gemv"}})"))
                .find("version"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"quantization_config": {"quant_method": "awq", "group_size": 0}})"))
                .find("group_size"),
            std::string::npos);
}

}  // namespace
}  // namespace moe::quant
