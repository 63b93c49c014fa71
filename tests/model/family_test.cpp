// The family registry (family.h): every supported model_type has its family file and the MoE rules the layer
// reads, in the same order; an unknown model_type is an error naming it and the supported ones; each family
// gives the attention kind and the MoE block's tensor prefix its checkpoints use.
#include "family.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "moe/layer/moe_config.h"

namespace moe::test {
namespace {

TEST(Family, EverySupportedModelTypeHasItsFamily) {
  const auto all = model::families();
  ASSERT_EQ(all.size(), supported_model_types().size());
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& type = supported_model_types()[i];
    EXPECT_EQ(all[i]->model_type, type);
    EXPECT_EQ(&model::find_family(type), all[i]);
    EXPECT_EQ(parse_moe_config({{"model_type", type}, {"num_experts_per_tok", 2}}).model_type, type);
  }
}

TEST(Family, UnknownModelTypeNamesTheSupportedOnes) {
  try {
    model::find_family("llama");
    FAIL() << "llama was found";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unsupported model_type 'llama'"), std::string::npos) << what;
    for (const std::string& type : supported_model_types()) EXPECT_NE(what.find(type), std::string::npos) << what;
  }
}

TEST(Family, AttentionKindAndParsedOptions) {
  using model::AttentionKind;
  EXPECT_EQ(model::find_family("mixtral").attention, AttentionKind::gqa);
  EXPECT_EQ(model::find_family("olmoe").attention, AttentionKind::gqa);
  EXPECT_EQ(model::find_family("deepseek_v2").attention, AttentionKind::mla);
  EXPECT_EQ(model::find_family("deepseek_v3").attention, AttentionKind::mla);
  model::ModelConfig m;
  model::find_family("qwen2_moe").parse_attention(nlohmann::json::object(), m);
  EXPECT_TRUE(m.qkv_bias);
  m = {};
  model::find_family("olmoe").parse_attention({{"clip_qkv", 8.0}}, m);
  EXPECT_EQ(m.qk_norm, model::QkNorm::whole);
  EXPECT_EQ(m.clip_qkv, 8.0);
  m = {};
  model::find_family("qwen3_moe").parse_attention(nlohmann::json::object(), m);
  EXPECT_EQ(m.qk_norm, model::QkNorm::per_head);
  m = {};
  model::find_family("deepseek_v3").parse_attention({{"rope_interleave", false}}, m);
  EXPECT_EQ(m.rope.layout, model::RopeLayout::halves);
  model::find_family("deepseek_v2").parse_attention(nlohmann::json::object(), m);
  EXPECT_EQ(m.rope.layout, model::RopeLayout::pairs);
}

}  // namespace
}  // namespace moe::test
