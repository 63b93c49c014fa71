// The attention op over a paged KV cache: for several sequences with cached and new tokens (GQA groups and
// one shared KV head), the output matches an fp64 causal softmax reference, and splitting the same cache
// into blocks of any size (1, 3, 16 tokens, or one block for everything) gives the same bits; append_kv
// writes each row to its block and row.
#include "cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_random.h"

namespace moe::test {
namespace {

struct Case {
  int64_t heads, kv_heads, dk, dv;
  std::vector<int64_t> starts, counts;  // per sequence: cached tokens, new tokens
};

// Runs the op with the cache of every sequence (contiguous rows [length, kv_heads, d]) cut into blocks of
// `block_tokens` rows, copied through append_kv.
Tensor run(const Case& c, const Tensor& q, const std::vector<Tensor>& keys, const std::vector<Tensor>& values,
           int64_t block_tokens) {
  const size_t n = c.starts.size();
  std::vector<std::vector<Tensor>> key_store(n), value_store(n);
  std::vector<std::vector<const float*>> key_ptrs(n), value_ptrs(n);
  std::vector<cpu::AttentionSpan> spans(n);
  int64_t row = 0;
  for (size_t s = 0; s < n; ++s) {
    const int64_t length = c.starts[s] + c.counts[s];
    const int64_t blocks = (length + block_tokens - 1) / block_tokens;
    std::vector<float*> kb, vb;
    for (int64_t b = 0; b < blocks; ++b) {
      key_store[s].push_back(Tensor::empty(DType::F32, {block_tokens, c.kv_heads * c.dk}));
      value_store[s].push_back(Tensor::empty(DType::F32, {block_tokens, c.kv_heads * c.dv}));
      fill_junk(key_store[s].back());
      fill_junk(value_store[s].back());
      kb.push_back(key_store[s].back().data_as<float>());
      vb.push_back(value_store[s].back().data_as<float>());
    }
    cpu::append_kv(keys[s], 0, length, 0, kb, block_tokens);
    cpu::append_kv(values[s], 0, length, 0, vb, block_tokens);
    key_ptrs[s].assign(kb.begin(), kb.end());
    value_ptrs[s].assign(vb.begin(), vb.end());
    spans[s] = {.row = row, .count = c.counts[s], .start = c.starts[s], .key_blocks = key_ptrs[s],
                .value_blocks = value_ptrs[s]};
    row += c.counts[s];
  }
  Tensor out = Tensor::empty(DType::F32, {row, c.heads * c.dv});
  fill_junk(out);
  cpu::attention(q, spans,
                 {.heads = c.heads, .kv_heads = c.kv_heads, .dk = c.dk, .dv = c.dv, .block_tokens = block_tokens,
                  .scale = 1.0 / std::sqrt(double(c.dk))},
                 out);
  return out;
}

TEST(CpuAttention, PagedBlocksGiveTheSameBitsAndMatchFp64) {
  const Case cases[] = {{.heads = 4, .kv_heads = 2, .dk = 16, .dv = 16, .starts = {0, 5, 40}, .counts = {7, 1, 3}},
                        {.heads = 3, .kv_heads = 1, .dk = 20, .dv = 12, .starts = {17, 0}, .counts = {2, 33}}};
  for (const Case& c : cases) {
    TestRng rng;
    int64_t T = 0;
    for (int64_t count : c.counts) T += count;
    const Tensor q = rng.normal_tensor({T, c.heads * c.dk});
    std::vector<Tensor> keys, values;
    for (size_t s = 0; s < c.starts.size(); ++s) {
      keys.push_back(rng.normal_tensor({c.starts[s] + c.counts[s], c.kv_heads * c.dk}));
      values.push_back(rng.normal_tensor({c.starts[s] + c.counts[s], c.kv_heads * c.dv}));
    }
    const Tensor whole = run(c, q, keys, values, 64);
    for (int64_t bt : {1, 3, 16}) {
      const Tensor paged = run(c, q, keys, values, bt);
      EXPECT_EQ(std::memcmp(paged.data(), whole.data(), whole.nbytes()), 0) << "block_tokens " << bt;
    }
    // fp64 reference: token i of sequence s sees positions [0, start + i].
    const int64_t group = c.heads / c.kv_heads;
    int64_t row = 0;
    for (size_t s = 0; s < c.starts.size(); ++s)
      for (int64_t i = 0; i < c.counts[s]; ++i, ++row)
        for (int64_t h = 0; h < c.heads; ++h) {
          const int64_t kvh = h / group, visible = c.starts[s] + i + 1;
          std::vector<double> p(visible);
          double top = -INFINITY, sum = 0;
          for (int64_t j = 0; j < visible; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < c.dk; ++d)
              dot += double{q.data_as<float>()[(row * c.heads + h) * c.dk + d]} *
                     keys[s].data_as<float>()[(j * c.kv_heads + kvh) * c.dk + d];
            p[j] = dot / std::sqrt(double(c.dk));
            top = std::max(top, p[j]);
          }
          for (double& v : p) sum += v = std::exp(v - top);
          for (int64_t d = 0; d < c.dv; ++d) {
            double expected = 0;
            for (int64_t j = 0; j < visible; ++j)
              expected += p[j] / sum * values[s].data_as<float>()[(j * c.kv_heads + kvh) * c.dv + d];
            ASSERT_NEAR(whole.data_as<float>()[(row * c.heads + h) * c.dv + d], expected, 1e-5)
                << "row " << row << " head " << h << " d " << d;
          }
        }
  }
}

}  // namespace
}  // namespace moe::test
