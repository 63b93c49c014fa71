// The paged KV cache: the block pool hands out, takes back and reuses blocks and names its size when it runs
// out; a sequence takes one block per 16 tokens as it grows and gives them back when released; and a
// sequence that runs in blocks another sequence used before (their old rows still in them) gets the logits
// of a fresh cache, next to a sequence that keeps running.
#include "kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "model_fixture.h"
#include "moe/core/check.h"

namespace moe::test {
namespace {

using model::KvBlockPool;
using model::ModelKvCache;

void expect_error(const std::function<void()>& f, const std::string& phrase) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << phrase;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(KvBlockPool, AllocatesFreesReusesAndRunsOut) {
  KvBlockPool pool({.num_layers = 2, .num_blocks = 3, .block_tokens = 4, .key_row = 8, .value_row = 6});
  std::set<int32_t> blocks;
  for (int i = 0; i < 3; ++i) blocks.insert(pool.allocate());
  EXPECT_EQ(blocks, (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.free_blocks(), 0);
  expect_error([&] { pool.allocate(); }, "out of blocks: all 3 blocks of 4 tokens");
  pool.free(1);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_EQ(pool.allocate(), 1);  // the freed block comes back
  pool.free(2);
  expect_error([&] { pool.free(2); }, "block 2 is not in use");
  expect_error([&] { pool.free(7); }, "block 7 is not in use");
  // Every (layer, block) has its own rows.
  std::set<const float*> rows;
  for (int64_t layer = 0; layer < 2; ++layer)
    for (int32_t b = 0; b < 3; ++b) rows.insert(pool.keys(layer, b)), rows.insert(pool.values(layer, b));
  EXPECT_EQ(rows.size(), 12u);
  EXPECT_EQ(pool.keys(0, 1) - pool.keys(0, 0), 4 * 8);
}

TEST(ModelKvCache, SequencesTakeBlocksAsTheyGrowAndGiveThemBack) {
  ModelKvCache cache(nullptr, 2, 2, 40, 8, 8);  // 2 sequences of up to 40 tokens: 3 blocks each
  EXPECT_EQ(cache.pool().free_blocks(), 6);
  cache.reserve(0, 17);
  EXPECT_EQ(cache.block_table(0).size(), 2u);
  cache.commit(0, 17);
  cache.reserve(0, 15);  // 32 tokens: still 2 blocks
  EXPECT_EQ(cache.block_table(0).size(), 2u);
  cache.reserve(1, 40);
  EXPECT_EQ(cache.block_table(1).size(), 3u);
  EXPECT_EQ(cache.pool().free_blocks(), 1);
  expect_error([&] { cache.reserve(0, 24); }, "max_length 40");
  cache.release(0);
  EXPECT_EQ(cache.length(0), 0);
  EXPECT_TRUE(cache.block_table(0).empty());
  EXPECT_EQ(cache.pool().free_blocks(), 3);
}

TEST(ModelKvCache, ReusedBlocksGiveTheLogitsOfAFreshCache) {
  const Fixture fixture = load_fixture("qwen3_moe");
  auto lm = model::CausalLM::load(fixture.dir);
  // a: the longer prompt, whose blocks the shorter one, b, reuses.
  std::vector<int32_t> a = fixture.cases.at(0).ids, b = fixture.cases.at(1).ids;
  if (a.size() < b.size()) std::swap(a, b);
  auto cache = lm->new_cache(2, 64);
  auto& paged = dynamic_cast<ModelKvCache&>(*cache);
  lm->forward(std::vector<std::vector<int32_t>>{a, b}, *cache, false);
  const std::vector<int32_t> used = paged.block_table(0);
  paged.release(0);
  // Sequence 0 starts again in the blocks it gave back, while sequence 1 decodes one more token.
  const Tensor reused = lm->forward(std::vector<std::vector<int32_t>>{b, {7}}, *cache, false);
  for (const int32_t block : paged.block_table(0))
    EXPECT_NE(std::find(used.begin(), used.end(), block), used.end()) << "block " << block << " was not reused";
  auto fresh_cache = lm->new_cache(2, 64);
  lm->forward(std::vector<std::vector<int32_t>>{{}, b}, *fresh_cache, false);
  const Tensor fresh = lm->forward(std::vector<std::vector<int32_t>>{b, {7}}, *fresh_cache, false);
  ASSERT_EQ(reused.nbytes(), fresh.nbytes());
  EXPECT_EQ(std::memcmp(reused.data(), fresh.data(), fresh.nbytes()), 0);
}

}  // namespace
}  // namespace moe::test
