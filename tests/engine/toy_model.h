#pragma once
// A small deterministic CausalLM for the engine's tests (a test double): its next token is a fixed
// function of the whole sequence so far, its routing a fixed function of the token, its logits soft and
// peaked at the next token (so that sampling has a real distribution to draw from). It records how many
// tokens each forward ran. Its cache counts blocks of kToyBlockTokens and fails a forward that
// takes more than the pool has.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "moe/model/causal_lm.h"

namespace moe::engine::test {

constexpr int64_t kVocab = 11;
constexpr int32_t kEos = 9;
constexpr int64_t kToyBlockTokens = 4;  // the toy cache's block, small so that tests run out of blocks

// The toy model's next token after `history`.
int32_t next_token(const std::vector<int32_t>& history);

// Experts of `token` in MoE layer `layer` (4 experts, top-2).
std::vector<int32_t> experts_of(int32_t token, int64_t layer);

// The continuation of one prompt, one token at a time, stopping at EOS (kept) or after max_new tokens.
std::vector<int32_t> expected_continuation(std::vector<int32_t> history, int64_t max_new);

class ToyModel : public model::CausalLM {
 public:
  ToyModel();
  const model::ModelInfo& info() const override { return info_; }
  std::unique_ptr<model::KvCache> new_cache(int64_t n, int64_t max_length) const override;
  std::unique_ptr<model::KvCache> new_paged_cache(int64_t n, int64_t max_length, int64_t num_blocks) const override;
  Tensor forward(std::span<const std::vector<int32_t>> new_tokens, model::KvCache& kv, bool last_only,
                 const model::RoutingObserver& observer) override;

  int64_t kv_memory_available() const override { return kv_memory; }

  std::vector<int64_t> forward_tokens;  // tokens in each forward, in call order
  int64_t kv_memory = int64_t{1} << 30;  // what kv_memory_available() says
  bool nan_logits = false;               // every forward's logits NaN (a model whose weights hold NaN)

 private:
  model::ModelInfo info_;
};

}  // namespace moe::engine::test
