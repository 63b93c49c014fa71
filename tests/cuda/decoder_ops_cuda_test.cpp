// Each of the GPU's decoder ops (engine/cuda_decoder_ops.cpp over cuda/decoder_kernels.h) against the
// CPU's op on the same inputs, rounded to bf16 first so that both sides see the same values. The GPU keeps
// activations in bf16 (one rounding of every output: a relative error of 2^-9 per element) and sums in fp32;
// the bound is a normwise relative error of 1e-2 per tensor (observed on the H200: a few 1e-3). Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "gpu_skip.h"
#include "cuda_decoder_ops.h"
#include "kv_cache.h"
#include "cuda/device_info.h"
#include "cuda/device_tensor.h"
#include "rope.h"

namespace moe::test {
namespace {

using model::BatchLayout;
using model::DecoderOps;
using model::ModelKvCache;

constexpr double kBf16Tolerance = 1e-2;

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::visible_gpus().empty()) return;
    gpu_ = engine::make_cuda_decoder_ops();
    cpu_ = model::make_cpu_decoder_ops();
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  // A host F32 tensor of normal values, rounded to bf16.
  Tensor random(std::vector<int64_t> shape, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::F32, std::move(shape));
    std::normal_distribution<float> normal(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = normal(rng_);
    return t.to(DType::BF16).to_f32();
  }
  static Tensor up(const Tensor& x) { return cuda::to_device(x, DType::BF16, nullptr); }
  // A weight as the GPU's ops keep it (bf16; norm weights and biases fp32).
  Tensor w16(const Tensor& w) { return gpu_->load_weight(w, false); }
  Tensor w32(const Tensor& w) { return gpu_->load_weight(w, true); }
  Tensor down(const Tensor& x) { return gpu_->to_host(x).to_f32(); }

  // ||got - want|| / ||want|| within the bf16 bound, the seed printed on failure.
  void expect_close(const Tensor& got_device, const Tensor& want, const char* what,
                    double bound = kBf16Tolerance) {
    const Tensor got = down(got_device);
    ASSERT_EQ(got.shape(), want.shape()) << what;
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double g = got.data_as<float>()[i], w = want.data_as<float>()[i];
      diff += (g - w) * (g - w);
      norm += w * w;
    }
    const double err = std::sqrt(diff / std::max(norm, 1e-30));
    EXPECT_LE(err, bound) << what << " (seed " << seed_ << ")";
    std::printf("[ op %s ] normwise relative error %.2e\n", what, err);
  }

  // The GPU ops' tables for a forward of `ids` (0s where empty) at `positions` (0, 1, ...: where empty) of
  // one sequence of a scratch cache, keeping `last_rows`: what begin_step gives them before their ops.
  void begin_rows(int64_t T, std::vector<int32_t> ids = {}, std::vector<int64_t> positions = {},
                  std::vector<int64_t> last_rows = {}) {
    if (ids.empty()) ids.assign(T, 0);
    if (positions.empty())
      for (int64_t t = 0; t < T; ++t) positions.push_back(t);
    scratch_ = std::make_unique<ModelKvCache>(this, 1, 1, 8192, 1, 1, /*num_blocks=*/0,
                                              [&](std::vector<int64_t> s) { return gpu_->kv_blocks(s); });
    scratch_->reserve(0, T);
    batch_ = {.spans = {{.seq = 0, .row = 0, .count = T, .start = 0}}, .positions = positions, .total = T};
    gpu_->begin_step({.batch = batch_, .ids = ids, .cache = *scratch_, .last_rows = last_rows, .choices = {}});
  }
  void begin(const BatchLayout& batch, const ModelKvCache& cache) {
    const std::vector<int32_t> ids(batch.total, 0);
    gpu_->begin_step({.batch = batch, .ids = ids, .cache = cache, .last_rows = {}, .choices = {}});
  }

  std::unique_ptr<DecoderOps> gpu_, cpu_;
  std::unique_ptr<ModelKvCache> scratch_;
  BatchLayout batch_;
  std::mt19937 rng_;
  unsigned seed_ = 0;
};

TEST_F(CudaOps, EmbeddingAddRmsNormAndGroupNorms) {
  MOE_SKIP_WITHOUT_GPU();
  const int64_t T = 7, H = 192, V = 50;
  const Tensor table = random({V, H}), weight = random({H}), delta = random({T, H});
  const std::vector<int32_t> ids = {3, 0, 49, 7, 7, 12, 31};
  begin_rows(T, ids);
  Tensor h_cpu = cpu_->embedding(table, ids), h_gpu = gpu_->embedding(w16(table), ids);
  expect_close(h_gpu, h_cpu, "embedding", 0);
  const Tensor n_cpu = cpu_->add_rms_norm(h_cpu, delta, weight, 1e-6);
  const Tensor n_gpu = gpu_->add_rms_norm(h_gpu, up(delta), w32(weight), 1e-6);
  expect_close(n_gpu, n_cpu, "add_rms_norm");
  expect_close(h_gpu, h_cpu, "add_rms_norm residual", 1e-6);
  EXPECT_THROW(gpu_->embedding(w16(table), std::vector<int32_t>{V}), Error);
  EXPECT_THROW(gpu_->embedding(w16(table), std::vector<int32_t>{1, 2}), Error);  // not the step's rows

  const int64_t D = 32;
  Tensor x = random({T, 4 * D}), head_weight = random({D});
  Tensor x_gpu = up(x);
  cpu_->rms_norm(x, head_weight, 1e-6, D);
  gpu_->rms_norm(x_gpu, w32(head_weight), 1e-6, D);
  expect_close(x_gpu, x, "rms_norm per head");
  Tensor y = random({T, 80}), prefix_weight = random({64});
  Tensor y_gpu = up(y);
  cpu_->rms_norm_prefix(y, prefix_weight, 1e-6, 64);
  gpu_->rms_norm_prefix(y_gpu, w32(prefix_weight), 1e-6, 64);
  expect_close(y_gpu, y, "rms_norm_prefix");
  Tensor c = random({T, 40}, 3.0f);
  Tensor c_gpu = up(c);
  cpu_->clamp(c, 1.5f);
  gpu_->clamp(c_gpu, 1.5f);
  expect_close(c_gpu, c, "clamp", 0);
}

TEST_F(CudaOps, RopeDefaultAndYarnEveryPairing) {
  MOE_SKIP_WITHOUT_GPU();
  const int64_t T = 5, heads = 3, D = 64;
  const std::vector<int64_t> positions = {0, 1, 17, 300, 4095};
  for (const model::RopeLayout layout :
       {model::RopeLayout::halves, model::RopeLayout::pairs, model::RopeLayout::pairs_to_halves}) {
    for (const bool yarn : {false, true}) {
      model::RopeConfig config;
      config.dim = 32;
      config.theta = 10000;
      config.layout = layout;
      if (yarn) {
        config.type = model::RopeType::yarn;
        config.factor = 40;
        config.original_max_position_embeddings = 4096;
        config.attention_factor = 1.37;
      }
      const model::Rope rope(config);
      Tensor x = random({T, heads * D});
      Tensor x_gpu = up(x);
      cpu_->rope(rope, x, heads, 16, positions);
      begin_rows(T, {}, positions);
      gpu_->rope(rope, x_gpu, heads, 16, positions);
      expect_close(x_gpu, x, yarn ? "rope yarn" : "rope default");
    }
  }
}

TEST_F(CudaOps, LinearSwigluGatherAndLmHead) {
  MOE_SKIP_WITHOUT_GPU();
  const int64_t T = 9, H = 128, I = 96, V = 1000;
  const Tensor x = random({T, H}), w = random({I, H}, 0.1f), bias = random({I});
  expect_close(gpu_->linear(up(x), w16(w), w32(bias)), cpu_->linear(x, w, bias), "linear with bias");
  expect_close(gpu_->linear(up(x), w16(w), {}), cpu_->linear(x, w, {}), "linear");
  const SwigluWeights mlp{
      .gate = random({I, H}, 0.1f), .up = random({I, H}, 0.1f), .down = random({H, I}, 0.1f)};
  const SwigluWeights mlp_gpu{.gate = w16(mlp.gate), .up = w16(mlp.up), .down = w16(mlp.down)};
  expect_close(gpu_->swiglu_mlp(up(x), mlp_gpu), cpu_->swiglu_mlp(x, mlp), "swiglu_mlp");
  const std::vector<int64_t> rows = {8, 0, 3};
  begin_rows(T, {}, {}, rows);
  expect_close(gpu_->gather_rows(up(x), rows), cpu_->gather_rows(x, rows), "gather_rows", 0);
  const Tensor head = random({V, H}, 0.1f);
  const Tensor logits = gpu_->lm_head(up(x), w16(head));
  EXPECT_EQ(logits.dtype(), DType::F32);
  expect_close(logits, cpu_->lm_head(x, head), "lm_head");
}

// A prefill of two sequences (one with blocks out of order) then a decode step of both, GQA with 4 query
// heads per KV head, against the CPU's attention over its own cache.
TEST_F(CudaOps, PagedAttentionPrefillThenDecode) {
  MOE_SKIP_WITHOUT_GPU();
  const int64_t heads = 8, kv_heads = 2, D = 64, row = kv_heads * D;
  ModelKvCache cpu_cache(this, 1, 2, 64, row, row);
  ModelKvCache gpu_cache(this, 1, 2, 64, row, row, /*num_blocks=*/0,
                         [&](std::vector<int64_t> s) { return gpu_->kv_blocks(s); });
  const model::AttentionShape shape{.heads = heads, .kv_heads = kv_heads, .dk = D, .dv = D, .scale = 0.125};
  for (const auto& counts : {std::vector<int64_t>{37, 5}, std::vector<int64_t>{1, 1}}) {
    BatchLayout batch;
    // Sequence 1 takes its blocks first, so that sequence 0's are not 0, 1, 2.
    for (ModelKvCache* c : {&cpu_cache, &gpu_cache}) {
      c->reserve(1, counts[1]);
      c->reserve(0, counts[0]);
    }
    for (int64_t s = 0; s < 2; ++s) {
      const int64_t start = cpu_cache.length(s);
      batch.spans.push_back({.seq = s, .row = batch.total, .count = counts[s], .start = start});
      for (int64_t i = 0; i < counts[s]; ++i) batch.positions.push_back(start + i);
      batch.total += counts[s];
    }
    const Tensor q = random({batch.total, heads * D}), k = random({batch.total, row}),
                 v = random({batch.total, row});
    cpu_->append_kv(cpu_cache, 0, batch, k, v);
    begin(batch, gpu_cache);
    gpu_->append_kv(gpu_cache, 0, batch, up(k), up(v));
    expect_close(gpu_->attention(up(q), gpu_cache, 0, batch, shape),
                 cpu_->attention(q, cpu_cache, 0, batch, shape),
                 counts[0] > 1 ? "attention prefill" : "attention decode");
    for (int64_t s = 0; s < 2; ++s) {
      cpu_cache.commit(s, counts[s]);
      gpu_cache.commit(s, counts[s]);
    }
  }
  EXPECT_NE(gpu_cache.block_table(0).front(), 0);
}

// The tiled prefill kernel (more than kPrefillAttentionRows rows a sequence) against the CPU: prompts of
// 1 to 300 rows beside a second sequence's 20 (so that a tile of 64 rows spans both), then a chunk of 70
// rows on the cached prompt beside a decode row; GQA ratios 1, 4 and 8, head sizes 64 and 128.
TEST_F(CudaOps, PagedAttentionTiledPrefillAndChunks) {
  MOE_SKIP_WITHOUT_GPU();
  struct Heads {
    int64_t heads, kv_heads, D;
  };
  for (const Heads h : {Heads{4, 4, 64}, Heads{8, 2, 128}, Heads{8, 1, 64}}) {
    const int64_t row = h.kv_heads * h.D;
    const model::AttentionShape shape{
        .heads = h.heads, .kv_heads = h.kv_heads, .dk = h.D, .dv = h.D, .scale = 1.0 / std::sqrt(h.D)};
    for (const int64_t prompt : {1, 17, 64, 100, 300}) {
      ModelKvCache cpu_cache(this, 1, 2, 512, row, row);
      ModelKvCache gpu_cache(this, 1, 2, 512, row, row, /*num_blocks=*/0,
                             [&](std::vector<int64_t> s) { return gpu_->kv_blocks(s); });
      for (const auto& counts : {std::vector<int64_t>{prompt, 20}, std::vector<int64_t>{70, 1}}) {
        BatchLayout batch;
        for (int64_t s = 0; s < 2; ++s) {
          cpu_cache.reserve(s, counts[s]);
          gpu_cache.reserve(s, counts[s]);
          const int64_t start = cpu_cache.length(s);
          batch.spans.push_back({.seq = s, .row = batch.total, .count = counts[s], .start = start});
          for (int64_t i = 0; i < counts[s]; ++i) batch.positions.push_back(start + i);
          batch.total += counts[s];
        }
        const Tensor q = random({batch.total, h.heads * h.D}), k = random({batch.total, row}),
                     v = random({batch.total, row});
        cpu_->append_kv(cpu_cache, 0, batch, k, v);
        begin(batch, gpu_cache);
        gpu_->append_kv(gpu_cache, 0, batch, up(k), up(v));
        const std::string what = "attention " + std::to_string(h.heads) + "/" + std::to_string(h.kv_heads) +
                                 " heads, D " + std::to_string(h.D) + ", rows " + std::to_string(counts[0]) +
                                 " + " + std::to_string(counts[1]) + " after " +
                                 std::to_string(cpu_cache.length(0));
        expect_close(gpu_->attention(up(q), gpu_cache, 0, batch, shape),
                     cpu_->attention(q, cpu_cache, 0, batch, shape), what.c_str());
        for (int64_t s = 0; s < 2; ++s) {
          cpu_cache.commit(s, counts[s]);
          gpu_cache.commit(s, counts[s]);
        }
      }
    }
  }
}

// attention_inputs on q, k and v as views of one fused projection's output (the GPU's one-pass kernel)
// against the CPU's ops one by one on copies: the projection after the call (q and k normed and rotated in
// place, v untouched) and the attention over what went into each cache, for a 37-row prefill (the tiled
// kernel) then a decode row, per-head norms on and off, RoPE pairings halves and pairs, head sizes 64, 128.
TEST_F(CudaOps, AttentionInputsFromFusedProjection) {
  MOE_SKIP_WITHOUT_GPU();
  const int64_t heads = 8, kv_heads = 2;
  for (const int64_t D : {64, 128})
    for (const bool norms_on : {true, false})
      for (const model::RopeLayout layout : {model::RopeLayout::halves, model::RopeLayout::pairs}) {
        const int64_t q_width = heads * D, kv_width = kv_heads * D, width = q_width + 2 * kv_width;
        model::RopeConfig config;
        config.dim = D;
        config.theta = 1e6;
        config.layout = layout;
        const model::Rope rope(config);
        const model::AttentionShape shape{
            .heads = heads, .kv_heads = kv_heads, .dk = D, .dv = D, .scale = 1.0 / std::sqrt(double(D))};
        model::HeadNorms cpu_norms, gpu_norms;
        cpu_norms.eps = gpu_norms.eps = 1e-6;
        if (norms_on) {
          cpu_norms.q = random({D}, 0.5f);
          cpu_norms.k = random({D}, 0.5f);
          gpu_norms.q = w32(cpu_norms.q);
          gpu_norms.k = w32(cpu_norms.k);
        }
        ModelKvCache cpu_cache(this, 1, 1, 256, kv_width, kv_width);
        ModelKvCache gpu_cache(this, 1, 1, 256, kv_width, kv_width, /*num_blocks=*/0,
                               [&](std::vector<int64_t> s) { return gpu_->kv_blocks(s); });
        for (const int64_t T : {37, 1}) {
          BatchLayout batch;
          cpu_cache.reserve(0, T);
          gpu_cache.reserve(0, T);
          const int64_t start = cpu_cache.length(0);
          batch.spans.push_back({.seq = 0, .row = 0, .count = T, .start = start});
          for (int64_t i = 0; i < T; ++i) batch.positions.push_back(start + i);
          batch.total = T;
          const Tensor qkv = random({T, width});
          // Columns [from, from + n) of a host [T, m] tensor, and back.
          const auto columns = [&](const Tensor& x, int64_t from, int64_t n) {
            Tensor out = Tensor::empty(DType::F32, {T, n});
            for (int64_t t = 0; t < T; ++t)
              std::copy_n(x.data_as<float>() + t * x.size(1) + from, n, out.data_as<float>() + t * n);
            return out;
          };
          Tensor q = columns(qkv, 0, q_width), k = columns(qkv, q_width, kv_width);
          const Tensor v = columns(qkv, q_width + kv_width, kv_width);
          cpu_->attention_inputs(q, k, v, cpu_norms, rope, shape, cpu_cache, 0, batch);
          Tensor want = Tensor::empty(DType::F32, {T, width});
          for (int64_t t = 0; t < T; ++t) {
            float* row = want.data_as<float>() + t * width;
            std::copy_n(q.data_as<float>() + t * q_width, q_width, row);
            std::copy_n(k.data_as<float>() + t * kv_width, kv_width, row + q_width);
            std::copy_n(v.data_as<float>() + t * kv_width, kv_width, row + q_width + kv_width);
          }
          begin(batch, gpu_cache);
          const Tensor qkv_gpu = up(qkv);
          Tensor q_gpu = qkv_gpu.narrow(1, 0, q_width), k_gpu = qkv_gpu.narrow(1, q_width, kv_width);
          const Tensor v_gpu = qkv_gpu.narrow(1, q_width + kv_width, kv_width);
          gpu_->attention_inputs(q_gpu, k_gpu, v_gpu, gpu_norms, rope, shape, gpu_cache, 0, batch);
          const std::string what = "attention_inputs D " + std::to_string(D) + (norms_on ? ", norms" : "") +
                                   (layout == model::RopeLayout::pairs ? ", pairs" : ", halves") + ", rows " +
                                   std::to_string(T);
          expect_close(qkv_gpu, want, what.c_str());
          expect_close(gpu_->attention(q_gpu, gpu_cache, 0, batch, shape),
                       cpu_->attention(q, cpu_cache, 0, batch, shape), (what + ", attention").c_str());
          cpu_cache.commit(0, T);
          gpu_cache.commit(0, T);
        }
      }
}

// The host copies come through reused page-locked buffers: one the caller still holds is never written.
TEST_F(CudaOps, HostCopiesStayValidWhileHeld) {
  MOE_SKIP_WITHOUT_GPU();
  const Tensor first = random({8, 1000});
  const Tensor held = gpu_->to_host(up(first));
  for (const int64_t rows : {2, 16, 8, 1, 32, 8}) {
    const Tensor other = random({rows, 1000});
    expect_close(gpu_->to_host(up(other)), other, "to_host", 0);
  }
  expect_close(up(held.to_f32()), first, "to_host held", 0);
}

// to_host_all: every tensor in order (a host one as it is), and the copies of one call stay valid while
// later calls run (their buffer is not reused while any of them is held).
TEST_F(CudaOps, HostCopiesTogetherStayValidWhileHeld) {
  MOE_SKIP_WITHOUT_GPU();
  const Tensor a = random({3, 7}), b = random({5, 130}), c = random({1, 1});
  const std::vector<Tensor> first = gpu_->to_host_all(std::vector<Tensor>{up(a), b, up(c)});
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[1].data(), b.data());
  for (const int64_t rows : {2, 40, 1}) {
    const Tensor x = random({rows, 33}), y = random({rows, 8});
    const std::vector<Tensor> got = gpu_->to_host_all(std::vector<Tensor>{up(x), up(y)});
    expect_close(up(got[0].to_f32()), x, "to_host_all x", 0);
    expect_close(up(got[1].to_f32()), y, "to_host_all y", 0);
  }
  expect_close(up(first[0].to_f32()), a, "to_host_all held a", 0);
  expect_close(up(first[2].to_f32()), c, "to_host_all held c", 0);
  const std::vector<Tensor> host_only = gpu_->to_host_all(std::vector<Tensor>{a, b});  // nothing to copy
  ASSERT_EQ(host_only.size(), 2u);
  EXPECT_EQ(host_only[0].data(), a.data());
  EXPECT_EQ(host_only[1].data(), b.data());
  EXPECT_TRUE(gpu_->to_host_all({}).empty());
}

TEST_F(CudaOps, MlaAbsorbedProducts) {
  MOE_SKIP_WITHOUT_GPU();
  const model::MlaShape shape{.heads = 4, .nope = 32, .rope = 16, .v = 24, .rank = 64};
  const int64_t T = 6;
  const Tensor kv_b = random({shape.heads * (shape.nope + shape.v), shape.rank}, 0.2f);
  const Tensor q = random({T, shape.heads * (shape.nope + shape.rope)});
  expect_close(gpu_->mla_absorb_queries(up(q), w16(kv_b), shape), cpu_->mla_absorb_queries(q, kv_b, shape),
               "mla_absorb_queries");
  const Tensor context = random({T, shape.heads * shape.rank});
  expect_close(gpu_->mla_expand_context(up(context), w16(kv_b), shape),
               cpu_->mla_expand_context(context, kv_b, shape), "mla_expand_context");
}

}  // namespace
}  // namespace moe::test
