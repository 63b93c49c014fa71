#pragma once
// TokenChoice's rule (causal_lm.h) on the host: the CPU's choice, CausalLM::forward_sample's default, and the
// reference the GPU's kernel (cuda/sampling.cu) is tested against.

#include <cstdint>
#include <span>

#include "moe/model/causal_lm.h"

namespace moe::model {

// Throws moe::Error naming the field and its range: temperature < 0 or not finite, top_k < 0, top_p outside
// (0, 1], uniform outside [0, 1).
void check_token_choice(const TokenChoice& choice);

// The token `choice` picks from one row of logits [V]; a NaN logit is a moe::Error.
int32_t choose_token(std::span<const float> logits, const TokenChoice& choice);

}  // namespace moe::model
