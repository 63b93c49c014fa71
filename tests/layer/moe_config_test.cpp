#include "moe/layer/moe_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "moe/core/check.h"

namespace moe {
namespace {

using routing::RoutingMethod;

MoeConfig fixture(const std::string& name) {
  return load_moe_config(std::string(MOE_TEST_DATA) + "/configs/" + name + ".json");
}

TEST(MoeConfig, Mixtral) {
  const MoeConfig c = fixture("mixtral-8x7b");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.expert_intermediate_size, 14336);
  EXPECT_EQ(c.router.n_experts, 8);
  EXPECT_EQ(c.router.top_k, 2);
  EXPECT_TRUE(c.router.norm_topk_prob);
  EXPECT_EQ(c.router.method, RoutingMethod::softmax_topk);
  EXPECT_EQ(c.naming, ExpertNaming::w1_w3_w2);
  EXPECT_EQ(c.shared, SharedExpertKind::none);
}

TEST(MoeConfig, Qwen2Moe) {
  const MoeConfig c = fixture("qwen1.5-moe-a2.7b");
  EXPECT_EQ(c.expert_intermediate_size, 1408);
  EXPECT_EQ(c.router.n_experts, 60);
  EXPECT_EQ(c.router.top_k, 4);
  EXPECT_FALSE(c.router.norm_topk_prob);
  EXPECT_EQ(c.shared, SharedExpertKind::sigmoid_gated);
  EXPECT_EQ(c.shared_intermediate_size, 5632);
}

TEST(MoeConfig, Qwen3MoeBothSpellingsAndSparseSteps) {
  const MoeConfig c = fixture("qwen3-30b-a3b");
  EXPECT_EQ(c.router.n_experts, 128);
  EXPECT_EQ(c.router.top_k, 8);
  EXPECT_TRUE(c.router.norm_topk_prob);
  EXPECT_EQ(c.expert_intermediate_size, 768);
  EXPECT_EQ(c.shared, SharedExpertKind::none);
  const MoeConfig v5 = fixture("qwen3-moe-transformers5");  // num_local_experts, mlp_only_layers, step 2
  EXPECT_EQ(v5.router.n_experts, 16);
  EXPECT_FALSE(is_moe_layer(v5, 0));
  EXPECT_TRUE(is_moe_layer(v5, 1));
  EXPECT_FALSE(is_moe_layer(v5, 2));
  EXPECT_TRUE(is_moe_layer(v5, 3));
}

TEST(MoeConfig, Olmoe) {
  const MoeConfig c = fixture("olmoe-1b-7b");
  EXPECT_EQ(c.expert_intermediate_size, 1024);  // OLMoE's experts use intermediate_size
  EXPECT_EQ(c.router.n_experts, 64);
  EXPECT_FALSE(c.router.norm_topk_prob);
}

TEST(MoeConfig, DeepSeekV2GreedyAndGroupLimited) {
  const MoeConfig lite = fixture("deepseek-v2-lite");
  EXPECT_EQ(lite.router.method, RoutingMethod::softmax_topk);
  EXPECT_EQ(lite.router.top_k, 6);
  EXPECT_EQ(lite.shared, SharedExpertKind::plain);
  EXPECT_EQ(lite.shared_intermediate_size, 2 * 1408);
  EXPECT_FALSE(is_moe_layer(lite, 0));
  EXPECT_TRUE(is_moe_layer(lite, 1));
  const MoeConfig full = fixture("deepseek-v2");
  EXPECT_EQ(full.router.method, RoutingMethod::group_limited_greedy);
  EXPECT_EQ(full.router.n_group, 8);
  EXPECT_EQ(full.router.topk_group, 3);
  EXPECT_FLOAT_EQ(full.router.routed_scaling_factor, 16.0f);
  EXPECT_FALSE(full.router.norm_topk_prob);
}

TEST(MoeConfig, DeepSeekV2IgnoresNormTopkProbLikeTransformers) {
  nlohmann::json j = {{"model_type", "deepseek_v2"}, {"num_experts_per_tok", 2}, {"norm_topk_prob", true}};
  EXPECT_FALSE(parse_moe_config(j).router.norm_topk_prob);
}

TEST(MoeConfig, DeepSeekV3) {
  const MoeConfig c = fixture("deepseek-v3");
  EXPECT_EQ(c.router.method, RoutingMethod::noaux_tc);
  EXPECT_EQ(c.router.n_experts, 256);
  EXPECT_EQ(c.router.n_group, 8);
  EXPECT_EQ(c.router.topk_group, 4);
  EXPECT_TRUE(c.router.norm_topk_prob);
  EXPECT_FLOAT_EQ(c.router.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(c.router_has_correction_bias);
  EXPECT_EQ(c.shared_intermediate_size, 2048);
  EXPECT_FALSE(is_moe_layer(c, 2));
  EXPECT_TRUE(is_moe_layer(c, 3));
}

TEST(MoeConfig, DefaultsFollowTransformers) {
  const MoeConfig v3 = parse_moe_config({{"model_type", "deepseek_v3"}});
  EXPECT_EQ(v3.hidden_size, 7168);
  EXPECT_EQ(v3.router.top_k, 8);
  const MoeConfig no_shared = parse_moe_config({{"model_type", "deepseek_v3"}, {"n_shared_experts", nullptr}});
  EXPECT_EQ(no_shared.shared, SharedExpertKind::none);
  const MoeConfig qwen2 = parse_moe_config({{"model_type", "qwen2_moe"}, {"shared_expert_intermediate_size", 0}});
  EXPECT_EQ(qwen2.shared, SharedExpertKind::none);
}

void expect_error(const nlohmann::json& j, const std::string& phrase) {
  try {
    parse_moe_config(j);
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(MoeConfig, BadConfigsAreNamed) {
  expect_error({{"model_type", "llama"}}, "llama");
  expect_error({{"hidden_size", 8}}, "model_type");
  expect_error({{"model_type", "mixtral"}, {"num_experts_per_tok", 9}}, "num_experts_per_tok");
  expect_error({{"model_type", "mixtral"}, {"num_experts_per_tok", "two"}}, "num_experts_per_tok");
  expect_error({{"model_type", "mixtral"}, {"hidden_act", "gelu"}}, "hidden_act");
  expect_error({{"model_type", "deepseek_v3"}, {"n_group", 7}}, "n_group");
  expect_error({{"model_type", "deepseek_v3"}, {"topk_group", 1}, {"n_routed_experts", 16}}, "topk_group");
  expect_error({{"model_type", "deepseek_v2"}}, "num_experts_per_tok");
  expect_error({{"model_type", "deepseek_v2"}, {"num_experts_per_tok", 2}, {"topk_method", "noaux_tc"}},
               "topk_method");
  expect_error({{"model_type", "deepseek_v2"}, {"num_experts_per_tok", 2}, {"topk_method", "group_limited_greedy"}},
               "n_group");
  expect_error({{"model_type", "olmoe"}, {"hidden_size", -4}}, "hidden_size");
  expect_error(nlohmann::json::array(), "object");
}

// transformers' attribute_map aliases of the DeepSeek expert count.
TEST(MoeConfig, DeepSeekExpertCountAliases) {
  nlohmann::json v2 = {{"model_type", "deepseek_v2"}, {"num_experts", 16}, {"num_experts_per_tok", 2}};
  EXPECT_EQ(parse_moe_config(v2).router.n_experts, 16);
  nlohmann::json v3 = {{"model_type", "deepseek_v3"}, {"num_local_experts", 32}, {"n_group", 4}, {"topk_group", 2}};
  EXPECT_EQ(parse_moe_config(v3).router.n_experts, 32);
}

TEST(MoeConfig, FileErrorsNameTheFile) {
  try {
    load_moe_config("/nonexistent/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace moe
