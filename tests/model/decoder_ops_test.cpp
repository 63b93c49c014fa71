// The decoder runs through DecoderOps only: a wrapper that counts each op and forwards to the CPU's ops sees
// every op the families use (GQA with per-head and whole q/k norms, qkv biases and clip_qkv; MLA with a
// dense layer), and the logits are the bits of the plain model.
#include "decoder_ops.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "model_fixture.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

using model::AttentionShape;
using model::BatchLayout;
using model::DecoderOps;
using model::MlaShape;
using model::ModelKvCache;
using model::Rope;

class CountingOps final : public DecoderOps {
 public:
  explicit CountingOps(std::map<std::string, int>& counts) : counts_(counts), cpu_(model::make_cpu_decoder_ops()) {}

  Tensor embedding(const Tensor& table, std::span<const int32_t> ids) override {
    return count("embedding"), cpu_->embedding(table, ids);
  }
  Tensor add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, double eps) override {
    return count("add_rms_norm"), cpu_->add_rms_norm(residual, delta, weight, eps);
  }
  void rms_norm(Tensor& x, const Tensor& weight, double eps, int64_t width) override {
    count(width == x.size(1) ? "rms_norm" : "rms_norm_groups"), cpu_->rms_norm(x, weight, eps, width);
  }
  void rms_norm_prefix(Tensor& x, const Tensor& weight, double eps, int64_t width) override {
    count("rms_norm_prefix"), cpu_->rms_norm_prefix(x, weight, eps, width);
  }
  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) override {
    return count(bias.defined() ? "linear_bias" : "linear"), cpu_->linear(x, weight, bias);
  }
  void clamp(Tensor& x, float clip) override { count("clamp"), cpu_->clamp(x, clip); }
  void rope(const Rope& rope, Tensor& x, int64_t heads, int64_t offset, std::span<const int64_t> positions) override {
    count("rope"), cpu_->rope(rope, x, heads, offset, positions);
  }
  void append_kv(ModelKvCache& cache, int64_t layer, const BatchLayout& batch, const Tensor& keys,
                 const Tensor& values) override {
    count("append_kv"), cpu_->append_kv(cache, layer, batch, keys, values);
  }
  Tensor attention(const Tensor& q, const ModelKvCache& cache, int64_t layer, const BatchLayout& batch,
                   const AttentionShape& shape) override {
    return count("attention"), cpu_->attention(q, cache, layer, batch, shape);
  }
  Tensor mla_absorb_queries(const Tensor& q, const Tensor& kv_b, const MlaShape& shape) override {
    return count("mla_absorb_queries"), cpu_->mla_absorb_queries(q, kv_b, shape);
  }
  Tensor mla_expand_context(const Tensor& context, const Tensor& kv_b, const MlaShape& shape) override {
    return count("mla_expand_context"), cpu_->mla_expand_context(context, kv_b, shape);
  }
  Tensor swiglu_mlp(const Tensor& x, const SwigluWeights& weights) override {
    return count("swiglu_mlp"), cpu_->swiglu_mlp(x, weights);
  }
  Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows) override {
    return count("gather_rows"), cpu_->gather_rows(x, rows);
  }
  Tensor lm_head(const Tensor& x, const Tensor& weight) override {
    return count("lm_head"), cpu_->lm_head(x, weight);
  }
  // Storage and transfers, not ops of the decoder's arithmetic: forwarded uncounted.
  Tensor load_weight(const Tensor& view, bool fp32) override { return cpu_->load_weight(view, fp32); }
  Tensor kv_blocks(std::vector<int64_t> shape) override { return cpu_->kv_blocks(std::move(shape)); }
  Tensor to_host(const Tensor& x) override { return cpu_->to_host(x); }

 private:
  void count(const std::string& op) { ++counts_[op]; }
  std::map<std::string, int>& counts_;
  std::unique_ptr<DecoderOps> cpu_;
};

// The olmoe fixture with clip_qkv set above every value (the fixture leaves it off), in dir/model.
std::filesystem::path olmoe_with_clip(const TempDir& dir) {
  const std::filesystem::path to = dir / "model";
  std::filesystem::copy(fixture_dir("olmoe"), to, std::filesystem::copy_options::recursive);
  nlohmann::json config;
  {
    std::ifstream in(to / "config.json");
    config = nlohmann::json::parse(in);
  }
  config["clip_qkv"] = 1e9;
  std::ofstream(to / "config.json") << config.dump(1);
  return to;
}

TEST(DecoderOps, EveryOpRunsThroughTheInterfaceWithTheSameBits) {
  const std::map<std::string, std::set<std::string>> expected = {
      {"qwen3_moe", {"embedding", "add_rms_norm", "rms_norm_groups", "linear", "rope", "append_kv", "attention",
                     "gather_rows", "lm_head"}},
      {"olmoe", {"embedding", "add_rms_norm", "rms_norm", "linear", "clamp", "rope", "append_kv", "attention",
                 "gather_rows", "lm_head"}},
      {"qwen2_moe", {"embedding", "add_rms_norm", "linear", "linear_bias", "rope", "append_kv", "attention",
                     "gather_rows", "lm_head"}},
      {"deepseek_v3", {"embedding", "add_rms_norm", "rms_norm", "rms_norm_prefix", "linear", "rope", "append_kv",
                       "attention", "mla_absorb_queries", "mla_expand_context", "swiglu_mlp", "gather_rows",
                       "lm_head"}},
  };
  for (const auto& [family, ops] : expected) {
    SCOPED_TRACE(family);
    const Fixture fixture = load_fixture(family);
    const TempDir dir;
    const std::filesystem::path model_dir = family == "olmoe" ? olmoe_with_clip(dir) : fixture.dir;
    std::map<std::string, int> counts;
    model::ModelOptions options;
    auto counted = model::load_causal_lm(model_dir, options, std::make_unique<CountingOps>(counts));
    auto plain = model::CausalLM::load(model_dir);
    const std::vector<std::vector<int32_t>> prompt = {fixture.cases.at(0).ids};
    auto cache_counted = counted->new_cache(1, 64), cache_plain = plain->new_cache(1, 64);
    const Tensor a = counted->forward(prompt, *cache_counted, true);
    const Tensor b = plain->forward(prompt, *cache_plain, true);
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
    for (const std::string& op : ops) EXPECT_GT(counts[op], 0) << op;
  }
}

}  // namespace
}  // namespace moe::test
