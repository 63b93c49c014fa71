#pragma once
// Deployment planning: the memory each rank needs for a model under expert parallelism, and whether it
// fits. All figures are estimates from config.json (documented in README "Expert parallelism"):
//   expert weights   slots on the rank × 3·H·I × MoE layers
//   other weights    replicated on every rank: embeddings and lm_head (V·H each, one if tied), attention per
//                    layer (MLA from q_lora_rank/kv_lora_rank/head dims, else q/k/v/o from the head counts),
//                    dense MLPs (3·H·intermediate_size) for non-MoE layers, router and shared experts
//   activations      N tokens: x and output fp32, router logits, expert rows for 2·N·k pairs (2× skew
//                    headroom) with their gate+up intermediates in fp32
//   communication    dispatch send + receive of N·min(k, R) token copies (receive 2× for skew), combine fp32
//   KV cache room    device memory − all of the above − a fixed 2 GiB reserve; KV bytes per token from MLA's
//                    (kv_lora_rank + qk_rope_head_dim) or 2·kv_heads·head_dim, bf16, over every layer

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "ep/placement.h"

namespace moe::ep {

enum class WeightDType : uint8_t { bf16, fp8 };  // fp8: e4m3 with one fp32 scale per 128×128 block

struct PlanRequest {
  int n_ranks = 1;
  int64_t device_bytes = 0;
  int64_t max_batched_tokens = 0;  // N: tokens per rank per step
  WeightDType dtype = WeightDType::bf16;
};

struct RankMemory {
  int rank = 0;
  int slots = 0;
  int64_t expert_bytes = 0, other_bytes = 0, activation_bytes = 0, comm_bytes = 0;
  int64_t kv_room_bytes = 0;  // negative when the rank does not fit
  int64_t kv_tokens = 0;      // tokens of KV cache that fit in the room (0 when it does not fit)
  int64_t used() const { return expert_bytes + other_bytes + activation_bytes + comm_bytes; }
};

struct Plan {
  std::vector<RankMemory> ranks;  // [R]
  int64_t kv_bytes_per_token = 0;
  std::vector<std::string> problems;  // empty: the setup works
};

inline constexpr int64_t kPlanReserveBytes = int64_t{2} << 30;

// "141GiB", "80GB", "512MiB", "1073741824" -> bytes; throws moe::Error on anything else.
int64_t parse_bytes(const std::string& text);

// The plan for hf_config under `placement` (its n_ranks must equal request.n_ranks).
Plan plan_memory(const nlohmann::json& hf_config, const Placement& placement, const PlanRequest& request);

}  // namespace moe::ep
