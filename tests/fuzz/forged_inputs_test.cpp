// Forged inputs: sizes and ids read from files are checked before anything is allocated for them or
// multiplied with them, and each is refused with a moe::Error that names the number. Every case here
// allocated gigabytes, overflowed or ran undefined behaviour before the check that now stops it.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../src/model/rope.h"
#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"
#include "cpu/fast_experts.h"
#include "moe/layer/moe_config.h"
#include "moe/model/model_config.h"
#include "moe/text/tokenizer.h"
#include "temp_dir.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  return length + header + data;
}

// Runs `f`, expecting a moe::Error whose message contains every phrase.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> phrases) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << *phrases.begin() << "\"";
  } catch (const Error& e) {
    for (const std::string& phrase : phrases)
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << "\"" << e.what() << "\" lacks \"" << phrase << "\"";
  }
}

TEST(ForgedSafetensors, HugeShapeIsRefusedWithoutAllocating) {
  test::TempDir dir;
  // 2^40 floats claimed, offsets consistent with them, 8 bytes of data: nothing may be read or allocated.
  write_bytes(dir / "a.safetensors",
              safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4398046511104]}})",
                                std::string(8, 'x')));
  expect_error([&] { SafetensorsFile::open(dir / "a.safetensors"); }, {"ends at byte 4398046511104", "only 8 bytes"});
}

TEST(ForgedSafetensors, MisalignedTensorsReadBackAsAlignedCopies) {
  test::TempDir dir;
  // A BF16 [1] then an F32 [2] at offset 2: the float data is misaligned in the mapping.
  const float values[2] = {1.5f, -3.0f};
  std::string data(2, '\0');
  data.append(reinterpret_cast<const char*>(values), sizeof(values));
  std::string header = R"({"h":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},)"
                       R"("w":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');  // the data section at 0 mod 8 of the page-aligned mapping
  write_bytes(dir / "a.safetensors", safetensors_bytes(header, data));
  const SafetensorsFile file = SafetensorsFile::open(dir / "a.safetensors");
  const Tensor w = file.get("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % alignof(float), 0u);
  EXPECT_EQ(w.data_as<float>()[0], 1.5f);
  EXPECT_EQ(w.data_as<float>()[1], -3.0f);
}

TEST(ForgedSafetensors, TheWriterAlignsEveryTensor) {
  test::TempDir dir;
  const float values[3] = {1, 2, 3};
  const Tensor f32 = Tensor::from_f32({3}, values);
  // Name order alone would put the F32 tensor after 3 bytes of U8 and 6 of BF16.
  write_safetensors(dir / "a.safetensors",
                    {{"a", Tensor::zeros(DType::U8, {3})}, {"b", f32.to(DType::BF16)}, {"c", f32}, {"d", Tensor::zeros(DType::I64, {1})}});
  const SafetensorsFile file = SafetensorsFile::open(dir / "a.safetensors");
  for (const std::string& name : file.names()) {
    const SafetensorsEntry& e = file.entry(name);
    EXPECT_EQ(e.begin % dtype_size(e.dtype), 0u) << name;
    EXPECT_EQ(file.get(name).data(), file.get(name).data()) << name << " must be a zero-copy view";
  }
  EXPECT_EQ(file.get("c").data_as<float>()[2], 3.0f);
}

TEST(ForgedCheckpoint, ShardsOutsideTheDirectoryAreRefused) {
  test::TempDir dir;
  for (const char* shard : {"/etc/passwd", "../model.safetensors", "sub/../../x.safetensors"}) {
    write_bytes(dir / "model.safetensors.index.json",
                json{{"weight_map", {{"w", shard}}}}.dump());
    expect_error([&] { Checkpoint::open(dir.path()); }, {"names shard", shard, "outside the checkpoint directory"});
  }
}

json mixtral_config() {
  return json{{"model_type", "mixtral"}, {"hidden_size", 64},       {"intermediate_size", 32},
              {"num_local_experts", 4},  {"num_experts_per_tok", 2}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"vocab_size", 100},     {"num_hidden_layers", 2}};
}

TEST(ForgedConfig, SizesAreBoundedBeforeUse) {
  for (const char* key : {"hidden_size", "intermediate_size"}) {
    json c = mixtral_config();
    c[key] = int64_t{1} << 40;
    expect_error([&] { parse_moe_config(c); }, {key, "1099511627776", "out of range"});
  }
  json c = mixtral_config();
  c["hidden_size"] = 1e300;  // casting it to an integer would be undefined behaviour
  expect_error([&] { parse_moe_config(c); }, {"hidden_size", "must be an integer"});
  c = mixtral_config();
  c["hidden_size"] = 18446744073709551615ull;
  expect_error([&] { parse_moe_config(c); }, {"hidden_size", "out of range"});
}

TEST(ForgedConfig, SharedExpertProductIsOverflowChecked) {
  json c = {{"model_type", "deepseek_v3"}, {"hidden_size", 64}, {"moe_intermediate_size", 1 << 20},
            {"n_routed_experts", 8},       {"num_experts_per_tok", 2}, {"n_group", 2}, {"topk_group", 1},
            {"n_shared_experts", int64_t{1} << 50}};
  expect_error([&] { parse_moe_config(c); }, {"n_shared_experts x moe_intermediate_size overflows"});
  c["n_shared_experts"] = 1 << 10;  // 2^30: no overflow, but beyond the size limit
  expect_error([&] { parse_moe_config(c); }, {"1073741824 is out of range"});
}

TEST(ForgedConfig, ScalingFactorBeyondFloatIsRefused) {
  json c = {{"model_type", "deepseek_v3"}, {"hidden_size", 64}, {"moe_intermediate_size", 16},
            {"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"n_group", 2}, {"topk_group", 1},
            {"routed_scaling_factor", 1e300}};
  expect_error([&] { parse_moe_config(c); }, {"routed_scaling_factor", "out of float range"});
}

TEST(ForgedModelConfig, HeadDimAndVocabAreBounded) {
  json c = mixtral_config();
  c["head_dim"] = int64_t{1} << 40;
  expect_error([&] { model::parse_model_config(c, json()); }, {"head_dim", "1099511627776", "out of range"});
  c = mixtral_config();
  c["vocab_size"] = int64_t{1} << 40;
  expect_error([&] { model::parse_model_config(c, json()); }, {"vocab_size", "out of range"});
  c = mixtral_config();
  c["eos_token_id"] = int64_t{1} << 40;
  expect_error([&] { model::parse_model_config(c, json()); }, {"eos_token_id", "must be a token id"});
}

TEST(ForgedModelConfig, RopeTablesAreSizedOnlyAfterTheChecks) {
  json c = mixtral_config();
  c["head_dim"] = 1 << 20;  // within the size limit, far beyond any rotary width: a 2 MB table per head before
  const model::ModelConfig m = model::parse_model_config(c, json());
  expect_error([&] { model::Rope rope(m.rope); }, {"rotary dimension 1048576 exceeds 512"});
  c = mixtral_config();
  c["rope_theta"] = 1e300;
  const model::ModelConfig big_theta = model::parse_model_config(c, json());
  expect_error([&] { model::Rope rope(big_theta.rope); }, {"rope_theta", "out of range"});
}

std::string tokenizer_json(const json& vocab, const json& added = json::array(), const json& extra = json::object()) {
  json t = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}, {"added_tokens", added}};
  t.update(extra);
  return t.dump();
}

TEST(ForgedTokenizer, HugeIdsAreRefusedWithoutAllocating) {
  // One token with id 2^31 - 1: a dense table for it is 64 GiB.
  expect_error([&] { Tokenizer::from_json(tokenizer_json({{"a", 2147483647}}), "t.json"); },
               {"t.json", "token 'a' has id 2147483647", "lists only 1 tokens"});
  const json added = json::array({{{"content", "<s>"}, {"id", 2000000000}}});
  expect_error([&] { Tokenizer::from_json(tokenizer_json({{"a", 0}}, added), "t.json"); },
               {"token '<s>' has id 2000000000"});
  // Holes are allowed, within limits.
  EXPECT_EQ(Tokenizer::from_json(tokenizer_json({{"a", 0}, {"b", 1000}}), "t.json").vocab_size(), 1001);
}

TEST(ForgedTokenizer, NonIntegerIdsAreRefused) {
  expect_error([&] { Tokenizer::from_json(tokenizer_json({{"a", 1e300}}), "t.json"); },
               {"the id of token 'a' must be an integer"});
  expect_error([&] { Tokenizer::from_json(tokenizer_json({{"a", 4294967296}}), "t.json"); },
               {"the id of token 'a' is 4294967296, outside"});
}

TEST(ForgedTokenizer, TemplateIdsMustBeInTheVocabulary) {
  const json post = {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                     {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array({77})}, {"tokens", json::array({"<s>"})}}}}}};
  expect_error([&] { Tokenizer::from_json(tokenizer_json({{"a", 0}}, json::array(), {{"post_processor", post}}), "t.json"); },
               {"special token '<s>' has id 77, which is not in the vocabulary"});
}

TEST(ForgedTokenizer, StripCountsAreBounded) {
  const json decoder = {{"type", "Strip"}, {"content", " "}, {"start", 1e12}, {"stop", 0}};
  expect_error([&] { Tokenizer::from_json(tokenizer_json({{"a", 0}}, json::array(), {{"decoder", decoder}}), "t.json"); },
               {"decoder Strip start must be an integer"});
}

TEST(ForgedWeights, Int8PackingRefusesNonFiniteWeights) {
  // Found by fuzz_layer_input (tests/fuzz/regressions/layer_input/nan_weight_int8_pack.bin): a NaN weight was
  // converted to int8, which is undefined behaviour.
  std::vector<float> values(4 * 8, 0.5f);
  values[9] = std::numeric_limits<float>::quiet_NaN();
  const SwigluWeights w{.gate = Tensor::from_f32({4, 8}, values), .up = Tensor::from_f32({4, 8}, values),
                        .down = Tensor::zeros(DType::F32, {8, 4})};
  expect_error([&] { cpu::pack_expert(w, quant::WeightFormat::int8); }, {"holds NaN or Inf"});
  EXPECT_NO_THROW(cpu::pack_expert(w, quant::WeightFormat::bf16));  // bf16 carries NaN as NaN
}

TEST(ForgedWeights, Int8PackingBoundsTheReductionLength) {
  // 128 * 127 * k overflows the int32 row sums beyond k = 132104: hidden_size 140000 is refused for int8.
  const int64_t H = 140000;
  const SwigluWeights w{.gate = Tensor::zeros(DType::BF16, {1, H}), .up = Tensor::zeros(DType::BF16, {1, H}),
                        .down = Tensor::zeros(DType::BF16, {H, 1})};
  expect_error([&] { cpu::pack_expert(w, quant::WeightFormat::int8); }, {"reduction lengths up to 132104", "got 140000"});
}

}  // namespace
}  // namespace moe
