#include "toy_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "moe/core/check.h"

namespace moe::engine::test {

namespace {

class ToyCache : public model::KvCache {
 public:
  ToyCache(int64_t n, int64_t max_length, int64_t num_blocks)
      : tokens(n), max_length(max_length), num_blocks(num_blocks) {}
  int64_t num_sequences() const override { return static_cast<int64_t>(tokens.size()); }
  int64_t length(int64_t seq) const override { return static_cast<int64_t>(tokens.at(seq).size()); }
  int64_t block_tokens() const override { return kToyBlockTokens; }
  int64_t total_blocks() const override { return num_blocks; }
  int64_t free_blocks() const override {
    int64_t used = 0;
    for (const auto& t : tokens) used += blocks_for(static_cast<int64_t>(t.size()));
    return num_blocks - used;
  }
  int64_t block_bytes() const override { return 64; }
  void release(int64_t seq) override { tokens.at(seq).clear(); }
  static int64_t blocks_for(int64_t n) { return (n + kToyBlockTokens - 1) / kToyBlockTokens; }

  std::vector<std::vector<int32_t>> tokens;
  int64_t max_length;
  int64_t num_blocks;
};

}  // namespace

int32_t next_token(const std::vector<int32_t>& history) {
  const int64_t sum = std::accumulate(history.begin(), history.end(), int64_t{0});
  return static_cast<int32_t>((sum * 7 + static_cast<int64_t>(history.size())) % 10);
}

std::vector<int32_t> experts_of(int32_t token, int64_t layer) {
  return {static_cast<int32_t>((token + layer) % 4), static_cast<int32_t>((token + layer + 1) % 4)};
}

std::vector<int32_t> expected_continuation(std::vector<int32_t> history, int64_t max_new) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_new) {
    out.push_back(next_token(history));
    history.push_back(out.back());
    if (out.back() == kEos) break;
  }
  return out;
}

ToyModel::ToyModel() {
  info_.model_type = "toy";
  info_.vocab_size = kVocab;
  info_.num_layers = 4;
  info_.moe_layers = {1, 3};
  info_.num_experts = 4;
  info_.top_k = 2;
  info_.eos_token_ids = {kEos, 10};
  info_.max_position_embeddings = 64;
}

std::unique_ptr<model::KvCache> ToyModel::new_cache(int64_t n, int64_t max_length) const {
  return new_paged_cache(n, max_length, n * ToyCache::blocks_for(max_length));
}

std::unique_ptr<model::KvCache> ToyModel::new_paged_cache(int64_t n, int64_t max_length, int64_t num_blocks) const {
  return std::make_unique<ToyCache>(n, max_length, num_blocks);
}

Tensor ToyModel::forward(std::span<const std::vector<int32_t>> new_tokens, model::KvCache& kv, bool last_only,
                         const model::RoutingObserver& observer) {
  auto& cache = dynamic_cast<ToyCache&>(kv);
  EXPECT_TRUE(last_only);
  EXPECT_EQ(static_cast<int64_t>(new_tokens.size()), cache.num_sequences());
  std::vector<float> logits;
  int64_t rows = 0, batch_tokens = 0;
  for (size_t s = 0; s < new_tokens.size(); ++s) {
    if (new_tokens[s].empty()) continue;
    for (int32_t t : new_tokens[s]) {
      const int64_t pos = cache.length(s);
      cache.tokens[s].push_back(t);
      for (int64_t layer : info_.moe_layers)
        if (observer) observer({.seq = static_cast<int64_t>(s), .pos = pos, .token = t, .layer = layer,
                                .experts = experts_of(t, layer), .weights = {0.75f, 0.25f}});
    }
    MOE_CHECK(cache.length(s) <= cache.max_length, "sequence {} outgrew the cache ({} > {})", s, cache.length(s),
              cache.max_length);
    MOE_CHECK(cache.free_blocks() >= 0, "the toy cache is out of blocks ({} in all)", cache.num_blocks);
    batch_tokens += static_cast<int64_t>(new_tokens[s].size());
    const int32_t target = next_token(cache.tokens[s]);
    for (int64_t v = 0; v < kVocab; ++v) logits.push_back(v == target ? 2.0f : -0.25f * static_cast<float>(v % 3));
    ++rows;
  }
  forward_tokens.push_back(batch_tokens);
  if (nan_logits) std::fill(logits.begin(), logits.end(), std::numeric_limits<float>::quiet_NaN());
  return Tensor::from_f32({rows, kVocab}, logits);
}

}  // namespace moe::engine::test
