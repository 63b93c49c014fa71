#include "cuda_test_util.h"

namespace moe::test {

nlohmann::json cuda_case_config(const std::string& type, int64_t H, int64_t I, int E, int k) {
  nlohmann::json c = {{"model_type", type}, {"hidden_size", H}, {"num_experts_per_tok", k}, {"hidden_act", "silu"}};
  if (type == "mixtral") {
    c["num_local_experts"] = E;
    c["intermediate_size"] = I;
  } else if (type == "olmoe") {
    c["num_experts"] = E;
    c["intermediate_size"] = I;
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    c["num_experts"] = E;
    c["moe_intermediate_size"] = I;
    c["norm_topk_prob"] = type == "qwen3_moe";
    c["shared_expert_intermediate_size"] = type == "qwen2_moe" ? 2 * I : 0;
  } else {
    c["n_routed_experts"] = E;
    c["moe_intermediate_size"] = I;
    c["n_shared_experts"] = 1;
    c["n_group"] = E % 8 == 0 ? 8 : 1;
    c["topk_group"] = E % 8 == 0 ? 4 : 1;
    c["routed_scaling_factor"] = 2.5;
    if (type == "deepseek_v2") c["topk_method"] = E % 8 == 0 ? "group_limited_greedy" : "greedy";
  }
  return c;
}

}  // namespace moe::test
