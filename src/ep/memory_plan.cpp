#include "ep/memory_plan.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "moe/core/check.h"
#include "moe/layer/moe_config.h"

namespace moe::ep {

namespace {

int64_t key_or(const nlohmann::json& j, const char* key, int64_t fallback) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : fallback;
}

// Bytes of a weight matrix of n parameters in the chosen dtype (fp8: + one fp32 scale per 128×128 block).
double matrix_bytes(double params, WeightDType dtype) {
  return dtype == WeightDType::bf16 ? 2.0 * params : params + 4.0 * params / (128.0 * 128.0);
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

int64_t parse_bytes(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string unit = text.substr(digits);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024.0;
  else if (unit == "GiB") scale = kGiB;
  else if (unit == "TiB") scale = kGiB * 1024.0;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  MOE_CHECK(digits > 0 && scale > 0, "memory size '{}': write a number with B, KiB, MiB, GiB, TiB, KB, MB, GB or TB "
            "(e.g. 141GiB)", text);
  const double value = std::stod(text.substr(0, digits)) * scale;
  MOE_CHECK(value > 0 && value < 9e18, "memory size '{}' is out of range", text);
  return static_cast<int64_t>(value);
}

Plan plan_memory(const nlohmann::json& j, const Placement& placement, const PlanRequest& request) {
  const MoeConfig config = parse_moe_config(j);
  MOE_CHECK(placement.n_ranks == request.n_ranks && placement.n_experts == config.router.n_experts,
            "placement for {} experts on {} ranks; the plan is for {} experts on {} ranks", placement.n_experts,
            placement.n_ranks, config.router.n_experts, request.n_ranks);
  MOE_CHECK(request.max_batched_tokens >= 1, "max_batched_tokens (tokens per rank per step) must be at least 1, got {}",
            request.max_batched_tokens);
  const double H = static_cast<double>(config.hidden_size), I = static_cast<double>(config.expert_intermediate_size);
  const double E = config.router.n_experts, k = config.router.top_k;
  const int64_t L = config.num_hidden_layers;
  MOE_CHECK(L >= 1, "config.json has no num_hidden_layers: the plan needs the layer count");
  const double V = static_cast<double>(key_or(j, "vocab_size", 0));
  const double heads = static_cast<double>(key_or(j, "num_attention_heads", 0));
  const double kv_heads = static_cast<double>(key_or(j, "num_key_value_heads", static_cast<int64_t>(heads)));
  const double head_dim = static_cast<double>(key_or(j, "head_dim", heads > 0 ? static_cast<int64_t>(H / heads) : 0));
  const double dense_I = static_cast<double>(key_or(j, "intermediate_size", 0));
  const bool tied = j.value("tie_word_embeddings", false);

  // Attention parameters and KV bytes per token of one layer.
  double attention = 0, kv_per_layer = 0;
  if (j.contains("kv_lora_rank") && j["kv_lora_rank"].is_number_integer()) {  // MLA (DeepSeek-V2/V3)
    const double q_lora = static_cast<double>(key_or(j, "q_lora_rank", 0)), kv_lora = j["kv_lora_rank"].get<double>();
    const double nope = static_cast<double>(key_or(j, "qk_nope_head_dim", 128));
    const double rope = static_cast<double>(key_or(j, "qk_rope_head_dim", 64));
    const double v_dim = static_cast<double>(key_or(j, "v_head_dim", 128));
    attention = (q_lora > 0 ? H * q_lora + q_lora * heads * (nope + rope) : H * heads * (nope + rope)) +
                H * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * H;
    kv_per_layer = 2.0 * (kv_lora + rope);
  } else {
    attention = H * heads * head_dim + 2.0 * H * kv_heads * head_dim + heads * head_dim * H;
    kv_per_layer = 2.0 * 2.0 * kv_heads * head_dim;
  }

  int64_t moe_layers = 0;
  for (int64_t l = 0; l < L; ++l) moe_layers += is_moe_layer(config, l) ? 1 : 0;
  const double dense_layers = static_cast<double>(L - moe_layers);
  const double expert_bytes_one = matrix_bytes(3.0 * H * I, request.dtype);
  // NOTE: embeddings, lm_head and router stay bf16 in either dtype (as fp8 checkpoints keep them).
  const double other = 2.0 * V * H * (tied ? 1 : 2) +
                       L * matrix_bytes(attention, request.dtype) + L * 2.0 * 2.0 * H +  // attention, two norms
                       dense_layers * matrix_bytes(3.0 * H * dense_I, request.dtype) +
                       moe_layers * (2.0 * E * H + matrix_bytes(3.0 * H * config.shared_intermediate_size, request.dtype));

  const double N = static_cast<double>(request.max_batched_tokens), R = request.n_ranks;
  const double copies = N * std::min(k, R);
  const double row_bytes = request.dtype == WeightDType::fp8 ? H + 4.0 * std::ceil(H / 128.0) : 2.0 * H;
  const double activations = 2.0 * N * H * 4.0 + N * E * 4.0 + 2.0 * N * k * (H + 2.0 * I) * 4.0;
  const double comm = copies * row_bytes * 3.0 + copies * H * 4.0 * 3.0;  // dispatch send + 2× receive, combine

  Plan plan;
  plan.kv_bytes_per_token = static_cast<int64_t>(kv_per_layer * static_cast<double>(L));
  for (int r = 0; r < request.n_ranks; ++r) {
    RankMemory m{.rank = r,
                 .slots = static_cast<int>(placement.rank_experts[r].size()),
                 .expert_bytes = static_cast<int64_t>(placement.rank_experts[r].size() * expert_bytes_one * moe_layers),
                 .other_bytes = static_cast<int64_t>(other),
                 .activation_bytes = static_cast<int64_t>(activations),
                 .comm_bytes = static_cast<int64_t>(comm)};
    m.kv_room_bytes = request.device_bytes - kPlanReserveBytes - m.used();
    m.kv_tokens = m.kv_room_bytes > 0 ? m.kv_room_bytes / std::max<int64_t>(plan.kv_bytes_per_token, 1) : 0;
    if (m.kv_room_bytes <= 0)
      plan.problems.push_back(fmt::format(
          "rank {} needs {:.1f} GiB (experts {:.1f}, other weights {:.1f}, activations {:.1f}, communication "
          "{:.1f}) plus a {:.0f} GiB reserve, more than its {:.1f} GiB: use more ranks, fp8 expert weights, or "
          "fewer batched tokens per rank",
          r, m.used() / kGiB, m.expert_bytes / kGiB, m.other_bytes / kGiB, m.activation_bytes / kGiB,
          m.comm_bytes / kGiB, kPlanReserveBytes / kGiB, request.device_bytes / kGiB));
    plan.ranks.push_back(m);
  }
  return plan;
}

}  // namespace moe::ep
