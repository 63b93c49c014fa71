#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>

namespace moe::test {

std::vector<uint16_t> bf16_bits(const Tensor& t) {
  const Tensor b = t.to(DType::BF16);
  return {b.data_as<uint16_t>(), b.data_as<uint16_t>() + b.numel()};
}

RandomExperts random_experts(int E, int64_t H, int64_t I, TestRng& rng) {
  RandomExperts r;
  for (int e = 0; e < E; ++e) {
    r.experts.push_back({rng.normal_tensor({I, H}, 0.1f, DType::BF16), rng.normal_tensor({I, H}, 0.1f, DType::BF16),
                         rng.normal_tensor({H, I}, 0.1f, DType::BF16)});
    for (const Tensor* t : {&r.experts.back().gate, &r.experts.back().up}) {
      const auto bits = bf16_bits(*t);
      r.w13.insert(r.w13.end(), bits.begin(), bits.end());
    }
    const auto bits = bf16_bits(r.experts.back().down);
    r.w2.insert(r.w2.end(), bits.begin(), bits.end());
  }
  return r;
}

double max_relative_error(const std::vector<float>& got, const Tensor& want) {
  MOE_CHECK(static_cast<int64_t>(got.size()) == want.numel(), "max_relative_error: {} values against {}",
            got.size(), want.numel());
  const float* w = want.data_as<float>();
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return HUGE_VAL;  // an unwritten (junk) or broken value fails every bound
    worst = std::max(worst, std::fabs(double{got[i]} - w[i]));
    scale = std::max(scale, std::fabs(double{w[i]}));
  }
  return worst / scale;
}

ChoiceAgreement compare_agreeing_tokens(const std::vector<float>& got, const std::vector<int32_t>& got_ids,
                                        const LayerOutput& want) {
  const int64_t T = want.hidden_states.size(0), H = want.hidden_states.size(1), k = want.topk.ids.size(1);
  MOE_CHECK(static_cast<int64_t>(got.size()) == T * H && static_cast<int64_t>(got_ids.size()) == T * k,
            "compare_agreeing_tokens: {} values and {} ids against [{}, {}] and [{}, {}]", got.size(), got_ids.size(),
            T, H, T, k);
  const float* w = want.hidden_states.data_as<float>();
  const int32_t* want_ids = want.topk.ids.data_as<int32_t>();
  ChoiceAgreement c;
  c.tokens = T;
  double worst = 0, scale = 1e-30;
  for (int64_t t = 0; t < T; ++t) {
    const bool same = std::equal(want_ids + t * k, want_ids + (t + 1) * k, got_ids.begin() + t * k);
    for (int64_t h = 0; h < H; ++h) {
      const double g = got[t * H + h];
      if (!std::isfinite(g)) worst = HUGE_VAL;  // an unwritten (junk) or broken value fails every bound
      scale = std::max(scale, std::fabs(double{w[t * H + h]}));
      if (same) worst = std::max(worst, std::fabs(g - w[t * H + h]));
    }
    c.same_choices += same;
  }
  c.rel_error = worst / scale;
  return c;
}

void expect_agreement(const ChoiceAgreement& c, const std::string& what) {
  EXPECT_LE(c.rel_error, 1e-2) << what;
  EXPECT_GE(c.same_choices, c.tokens - std::max<int64_t>(1, c.tokens / 50)) << what;
}

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
