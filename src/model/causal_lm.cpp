// The causal LM: embeddings -> decoder layers (input_layernorm, attention, residual,
// post_attention_layernorm, MoE block or dense MLP, residual) -> final norm -> lm_head, as transformers
// 5.17's <Family>ForCausalLM computes it in fp32. Loading and the batched forward live here, written against
// DecoderOps (decoder_ops.h); the pieces in attention.h, moe_block.h, rope.h, kv_cache.h, family.h.
#include "moe/model/causal_lm.h"

#include <algorithm>
#include <optional>

#include "attention.h"
#include "core/host_memory.h"
#include "decode_graphs.h"
#include "decoder_ops.h"
#include "family.h"
#include "forward_timer.h"
#include "kv_cache.h"
#include "moe/model/model_config.h"
#include "moe_block.h"
#include "rope.h"
#include "token_choice.h"
#include "weight_reader.h"

namespace moe::model {

namespace {

struct DecoderLayer {
  Tensor input_norm, post_norm;  // [H] F32
  std::unique_ptr<Attention> attention;
  std::unique_ptr<MoeBlock> moe;  // set for MoE layers
  SwigluWeights dense;            // set for dense layers (checkpoint views)
};

// The weights of a HuggingFace directory: model.safetensors.index.json (sharded) or model.safetensors.
// (Checkpoint::open would also take any lone *.safetensors, which here could be an unrelated file.)
Checkpoint open_weights(const std::filesystem::path& dir) {
  MOE_CHECK(std::filesystem::exists(dir / "model.safetensors.index.json") ||
                std::filesystem::exists(dir / "model.safetensors"),
            "'{}' has neither model.safetensors nor model.safetensors.index.json: the weights are missing",
            dir.string());
  return Checkpoint::open(dir);
}

class Model final : public CausalLM {
 public:
  Model(ModelConfig config, Checkpoint checkpoint, const ModelOptions& options,
        std::unique_ptr<DecoderOps> ops)
      : config_(std::move(config)),
        checkpoint_(std::move(checkpoint)),
        family_(find_family(config_.model_type)),
        reader_(checkpoint_, config_.model_type, config_.moe.quant,
                [this](const Tensor& view, bool fp32) { return ops_->load_weight(view, fp32); }),
        rope_(config_.rope),
        ops_(std::move(ops)),
        times_(options.times),
        // NOTE: a caller's MoE blocks (expert parallelism) exchange over the host between ranks, which a
        // recording cannot hold: their decode steps run eagerly.
        record_decode_(options.backend == ModelBackend::cuda && !options.enforce_eager && !options.moe_block) {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size, V = c.vocab_size;
    const std::string vocab_why = fmt::format("vocab_size {}, hidden_size {}", V, H);
    embed_ = reader_.get("model.embed_tokens.weight", {V, H}, vocab_why);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      layers_.push_back(load_layer(i, options));
      if (options.progress) options.progress(i + 1, c.num_layers);
    }
    final_norm_ = reader_.get_f32("model.norm.weight", {H}, "hidden_size");
    // NOTE: with tie_word_embeddings transformers uses the embedding as lm_head, even if the file has one.
    lm_head_ = c.tie_word_embeddings ? embed_ : reader_.get("lm_head.weight", {V, H}, vocab_why + " (tie_word_embeddings false)");

    info_ = {.model_type = c.model_type, .vocab_size = V, .hidden_size = H, .num_layers = c.num_layers,
             .max_position_embeddings = c.max_position_embeddings, .moe_layers = {},
             .num_experts = c.moe.router.n_experts, .top_k = c.moe.router.top_k, .eos_token_ids = c.eos_token_ids,
             .bos_token_id = c.bos_token_id};
    for (int64_t i = 0; i < c.num_layers; ++i)
      if (layers_[i].moe) info_.moe_layers.push_back(i);
  }

  const ModelInfo& info() const override { return info_; }
  int64_t kv_memory_available() const override { return ops_->memory_available(); }
  int64_t recorded_decode_steps() const override { return graphs_.size(); }

  std::unique_ptr<KvCache> new_cache(int64_t num_sequences, int64_t max_length) const override {
    return new_paged_cache(num_sequences, max_length, 0);
  }

  // num_blocks 0: room for every sequence at max_length.
  std::unique_ptr<KvCache> new_paged_cache(int64_t num_sequences, int64_t max_length,
                                           int64_t num_blocks) const override {
    MOE_CHECK(config_.sliding_window == 0 || max_length <= config_.sliding_window,
              "{} uses sliding-window attention (sliding_window {}), which this engine does not implement: "
              "sequences are limited to {} tokens, asked for {}",
              config_.model_type, config_.sliding_window, config_.sliding_window, max_length);
    const ModelConfig& c = config_;
    // Floats per token and layer: GQA keys and values of every KV head; MLA the latent and the rotary key
    // as its one key, the latent as its value (mla_attention.cpp).
    const bool mla = c.attention == AttentionKind::mla;
    const int64_t key_row = mla ? c.kv_lora_rank + c.qk_rope_head_dim : c.num_kv_heads * c.head_dim;
    const int64_t value_row = mla ? c.kv_lora_rank : c.num_kv_heads * c.head_dim;
    return std::make_unique<ModelKvCache>(this, c.num_layers, num_sequences, max_length, key_row, value_row,
                                          num_blocks,
                                          [this](std::vector<int64_t> shape) { return ops_->kv_blocks(std::move(shape)); });
  }

  Tensor forward(std::span<const std::vector<int32_t>> new_tokens, KvCache& kv_cache, bool last_only,
                 const RoutingObserver& observer) override {
    ModelKvCache& cache = model_cache(kv_cache, new_tokens.size());
    std::vector<int32_t> ids;
    const BatchLayout batch = layout(new_tokens, cache, ids);
    if (batch.total == 0) return Tensor::empty(DType::F32, {0, config_.vocab_size});
    return timed(times_, &ForwardTimes::total,
                 [&] { return run_layers(batch, ids, cache, last_only, observer, {}); });
  }

  std::vector<int32_t> forward_sample(std::span<const std::vector<int32_t>> new_tokens, KvCache& kv_cache,
                                      std::span<const TokenChoice> choices,
                                      const RoutingObserver& observer) override {
    for (const TokenChoice& c : choices) check_token_choice(c);
    ModelKvCache& cache = model_cache(kv_cache, new_tokens.size());
    const auto with_tokens =
        std::count_if(new_tokens.begin(), new_tokens.end(), [](const auto& t) { return !t.empty(); });
    MOE_CHECK(static_cast<int64_t>(choices.size()) == with_tokens,
              "forward_sample: {} token choices for {} sequences with new tokens (one each)", choices.size(),
              with_tokens);
    std::vector<int32_t> ids;
    const BatchLayout batch = layout(new_tokens, cache, ids);
    if (batch.total == 0) return {};
    std::optional<Tensor> replayed =
        timed(times_, &ForwardTimes::total, [&] { return replay_decode(batch, ids, cache, choices, observer); });
    const Tensor chosen = replayed ? std::move(*replayed)
                                   : timed(times_, &ForwardTimes::total,
                                           [&] { return run_layers(batch, ids, cache, true, observer, choices); });
    return {chosen.data_as<int32_t>(), chosen.data_as<int32_t>() + chosen.numel()};
  }

 private:
  ModelKvCache& model_cache(KvCache& kv_cache, size_t sequences) const {
    auto* cache = dynamic_cast<ModelKvCache*>(&kv_cache);
    MOE_CHECK(cache && cache->owner() == this, "forward: the KV cache was not made by this model's new_cache");
    MOE_CHECK(
        static_cast<int64_t>(sequences) == cache->num_sequences(),
        "forward: {} token lists for a cache of {} sequences (pass an empty list for a sequence without "
        "new tokens)",
        sequences, cache->num_sequences());
    return *cache;
  }

  // Where each sequence's new tokens go in the batch (their blocks reserved), and the batch's ids in order.
  static BatchLayout layout(std::span<const std::vector<int32_t>> new_tokens, ModelKvCache& cache,
                            std::vector<int32_t>& ids) {
    BatchLayout batch;
    for (int64_t s = 0; s < cache.num_sequences(); ++s) {
      const auto& tokens = new_tokens[s];
      if (tokens.empty()) continue;
      const int64_t start = cache.length(s), count = static_cast<int64_t>(tokens.size());
      MOE_CHECK(start + count <= cache.max_length(),
                "sequence {} would hold {} tokens, more than the cache's max_length {}", s, start + count,
                cache.max_length());
      cache.reserve(s, count);  // the blocks for the new rows; checks max_length
      batch.spans.push_back({.seq = s, .row = batch.total, .count = count, .start = start});
      for (int64_t i = 0; i < count; ++i) batch.positions.push_back(start + i);
      ids.insert(ids.end(), tokens.begin(), tokens.end());
      batch.total += count;
    }
    return batch;
  }

  // The logits [rows, V] on the host, or with `choices` the chosen ids [spans] I32 on the host.
  Tensor run_layers(const BatchLayout& batch, const std::vector<int32_t>& ids, ModelKvCache& cache,
                    bool last_only, const RoutingObserver& observer, std::span<const TokenChoice> choices) {
    std::vector<int64_t> last_rows;  // empty: every row
    if (last_only && batch.total > static_cast<int64_t>(batch.spans.size()))
      for (const BatchLayout::Span& s : batch.spans) last_rows.push_back(s.row + s.count - 1);
    ops_->begin_step({.batch = batch, .ids = ids, .cache = cache, .last_rows = last_rows, .choices = choices});
    std::vector<TopK> routing;  // of the MoE layers, in order
    const Tensor out = enqueue_decoder(batch, ids, cache, last_rows, observer ? &routing : nullptr, {});  // [rows, H]
    for (const BatchLayout::Span& s : batch.spans) cache.commit(s.seq, s.count);
    Tensor result;
    if (choices.empty()) {
      result =
          timed(times_, &ForwardTimes::lm_head, [&] { return ops_->to_host(ops_->lm_head(out, lm_head_)); });
    } else {
      const Tensor logits =
          timed(times_, &ForwardTimes::lm_head, [&] { return ops_->lm_head(out, lm_head_); });
      const std::vector<int32_t> chosen =
          timed(times_, &ForwardTimes::sampling, [&] { return ops_->choose_tokens(logits, choices); });
      result = Tensor::empty(DType::I32, {static_cast<int64_t>(chosen.size())});
      std::copy(chosen.begin(), chosen.end(), result.data_as<int32_t>());
    }
    std::vector<Tensor> device_routing;  // [ids, weights] of each MoE layer, in order
    for (const TopK& topk : routing) {
      device_routing.push_back(topk.ids);
      device_routing.push_back(topk.weights);
    }
    const std::vector<Tensor> host_routing = ops_->to_host_all(device_routing);
    for (size_t i = 0; i < routing.size(); ++i)
      report_routing(observer, batch, ids, info_.moe_layers[i], {host_routing[2 * i], host_routing[2 * i + 1]});
    return result;  // logits [rows, V] or ids [spans]
  }

  // The embeddings, the decoder layers and the final norm on the ops, keeping rows `last_rows` (empty: all)
  // -> [rows, H]. Each MoE layer's routing goes to `routing` (null: nowhere), or with `routing_into`
  // ([moe layers, T, k] ids and weights) there.
  Tensor enqueue_decoder(const BatchLayout& batch, std::span<const int32_t> ids, ModelKvCache& cache,
                         std::span<const int64_t> last_rows, std::vector<TopK>* routing, const TopK& routing_into) {
    const double eps = config_.rms_norm_eps;
    // h += delta (the last block's output; undefined before the first), then h's norm by `weight`.
    const auto add_norm = [&](Tensor& h, const Tensor& delta, const Tensor& weight) {
      return timed(times_, &ForwardTimes::norms, [&] { return ops_->add_rms_norm(h, delta, weight, eps); });
    };
    Tensor h = timed(times_, &ForwardTimes::embedding, [&] { return ops_->embedding(embed_, ids); });  // [T, H]
    Tensor delta;                                                                                      // [T, H]
    // NOTE: the routing is read once the whole forward is enqueued: on a device, reading it after each layer
    // would wait for that layer's work before the next layer's could be queued.
    int64_t moe_index = 0;
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      DecoderLayer& layer = layers_[l];
      delta = layer.attention->forward(add_norm(h, delta, layer.input_norm), batch, cache, l);
      const Tensor x = add_norm(h, delta, layer.post_norm);
      if (layer.moe) {
        const TopK into = routing_into.ids.defined() ? TopK{.ids = routing_into.ids.select(moe_index),
                                                             .weights = routing_into.weights.select(moe_index)}
                                                     : TopK{};
        ++moe_index;
        MoeBlockOutput out =
            timed(times_, &ForwardTimes::moe, [&] { return layer.moe->forward(x, into.ids.defined() ? &into : nullptr); });
        // NOTE: a device block's output stays on the device (reading it back would wait for each layer):
        // there the engine checks the logits it samples from.
        if (out.hidden_states.device() == Device::cpu)
          check_output_finite(out.hidden_states, out.topk, fmt::format("layer {}", l));
        delta = std::move(out.hidden_states);
        if (routing) routing->push_back(std::move(out.topk));
      } else {
        delta = timed(times_, &ForwardTimes::dense_mlp, [&] { return ops_->swiglu_mlp(x, layer.dense); });
      }
    }
    // NOTE: the final norm is per row, so norming every row and keeping the last ones gives their bits.
    Tensor out = add_norm(h, delta, final_norm_);  // [T, H]
    return last_rows.empty() ? out : ops_->gather_rows(out, last_rows);  // [rows, H]
  }

  // A decode step through its bucket's recording (recorded at the bucket's first step): the chosen ids
  // [spans], or nothing where the step is not one (a prompt chunk in it, too many rows, recordings off).
  std::optional<Tensor> replay_decode(const BatchLayout& batch, const std::vector<int32_t>& ids, ModelKvCache& cache,
                                      std::span<const TokenChoice> choices, const RoutingObserver& observer) {
    // NOTE: a profiling pass (times_->fence) times each part, which a replay does not show.
    if (!record_decode_ || (times_ && times_->fence)) return std::nullopt;
    const auto rows = static_cast<int64_t>(batch.spans.size());
    const int64_t bucket = decode_graph_bucket(rows);
    if (bucket == 0 || batch.total != rows) return std::nullopt;
    // The padding rows repeat the first row's inputs, so that they read what it reads and route where it does.
    BatchLayout padded = batch;
    std::vector<int32_t> padded_ids = ids;
    std::vector<TokenChoice> padded_choices(choices.begin(), choices.end());
    for (int64_t r = rows; r < bucket; ++r) {
      BatchLayout::Span pad = batch.spans.front();
      pad.row = r;
      pad.pad = true;
      padded.spans.push_back(pad);
      padded.positions.push_back(pad.start);
      padded_ids.push_back(ids.front());
      padded_choices.push_back(choices.front());
    }
    padded.total = bucket;
    ops_->begin_step({.batch = padded, .ids = padded_ids, .cache = cache, .last_rows = {},
                      .choices = padded_choices, .recorded_rows = bucket});
    DecodeGraph* graph = graphs_.find(cache.serial(), bucket);
    if (!graph) {
      const int64_t moe_layers = static_cast<int64_t>(info_.moe_layers.size()), k = info_.top_k;
      DecodeGraph fresh{.step = nullptr,
                        .ids = ops_->empty(DType::I32, {bucket}),
                        .routing_ids = ops_->empty(DType::I32, {moe_layers, bucket, k}),
                        .routing_weights = ops_->empty(DType::F32, {moe_layers, bucket, k})};
      const auto step = [&] {
        const Tensor out = enqueue_decoder(padded, padded_ids, cache, {}, nullptr,
                                           {.ids = fresh.routing_ids, .weights = fresh.routing_weights});
        ops_->choose_tokens_into(ops_->lm_head(out, lm_head_), padded_choices, fresh.ids);
      };
      // NOTE: run once first, so that whatever the ops make at a shape's first use (workspaces, cached
      // tables) exists before the recording, which must not allocate what outlives it. The step's cache rows
      // are written twice, with the same values.
      step();
      fresh.step = ops_->record(step);
      MOE_CHECK(fresh.step != nullptr, "the decoder's ops on {} cannot record a decode step (run eagerly)",
                config_.model_type);
      graph = &graphs_.add(bucket, std::move(fresh));
    }
    graph->step->replay();
    for (const BatchLayout::Span& s : batch.spans) cache.commit(s.seq, s.count);
    std::vector<Tensor> outputs{graph->ids};
    if (observer) outputs.insert(outputs.end(), {graph->routing_ids, graph->routing_weights});
    const std::vector<Tensor> host = ops_->to_host_all(outputs);
    const int32_t* chosen = host[0].data_as<int32_t>();
    for (int64_t r = 0; r < rows; ++r)
      MOE_CHECK(chosen[r] >= 0,
                "the model's logits are not finite (row {} of the step): a layer overflowed or the weights hold "
                "NaN or Inf (the CPU backend names the layer)", r);
    for (size_t m = 0; observer && m < info_.moe_layers.size(); ++m)
      report_routing(observer, batch, ids, info_.moe_layers[m],
                     {.ids = host[1].select(static_cast<int64_t>(m)), .weights = host[2].select(static_cast<int64_t>(m))});
    Tensor result = Tensor::empty(DType::I32, {rows});
    std::copy(chosen, chosen + rows, result.data_as<int32_t>());
    return result;
  }

  DecoderLayer load_layer(int64_t i, const ModelOptions& options) {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size;
    const std::string p = fmt::format("model.layers.{}.", i);
    DecoderLayer layer;
    layer.input_norm = reader_.get_f32(p + "input_layernorm.weight", {H}, "hidden_size");
    layer.post_norm = reader_.get_f32(p + "post_attention_layernorm.weight", {H}, "hidden_size");
    layer.attention = c.attention == AttentionKind::mla ? make_mla_attention(c, reader_, i, rope_, *ops_, times_)
                                                        : make_gqa_attention(c, reader_, i, rope_, *ops_, times_);
    if (is_moe_layer(c.moe, i)) {
      const std::string prefix = family_.moe_block_prefix(checkpoint_, p);
      MoeWeights weights = load_moe_weights(checkpoint_, prefix, c.moe);
      if (options.moe_block)
        layer.moe = make_function_moe_block(options.moe_block(i, c.moe, std::move(weights)));
      else
        layer.moe = options.backend == ModelBackend::cuda ? make_cuda_moe_block(c.moe, weights, options, ops_->stream())
                                                          : make_cpu_moe_block(c.moe, std::move(weights), options);
    } else {
      const int64_t I = c.intermediate_size;
      const std::string why = fmt::format("intermediate_size {}, hidden_size {} (dense layer)", I, H);
      layer.dense = {.gate = reader_.get(p + "mlp.gate_proj.weight", {I, H}, why),
                     .up = reader_.get(p + "mlp.up_proj.weight", {I, H}, why),
                     .down = reader_.get(p + "mlp.down_proj.weight", {H, I}, why)};
    }
    return layer;
  }

  static void report_routing(const RoutingObserver& observer, const BatchLayout& batch,
                             const std::vector<int32_t>& ids, int64_t layer, const TopK& topk) {
    const int64_t k = topk.ids.size(1);
    RoutingEvent event;
    event.layer = layer;
    for (const BatchLayout::Span& s : batch.spans) {
      for (int64_t i = 0; i < s.count; ++i) {
        const int64_t row = s.row + i;
        event.seq = s.seq;
        event.pos = s.start + i;
        event.token = ids[row];
        event.experts.assign(topk.ids.data_as<int32_t>() + row * k, topk.ids.data_as<int32_t>() + (row + 1) * k);
        event.weights.assign(topk.weights.data_as<float>() + row * k, topk.weights.data_as<float>() + (row + 1) * k);
        observer(event);
      }
    }
  }

  ModelConfig config_;
  Checkpoint checkpoint_;
  const Family& family_;
  WeightReader reader_;
  Rope rope_;
  std::unique_ptr<DecoderOps> ops_;
  ForwardTimes* times_;  // may be null
  const bool record_decode_;  // decode steps replay recordings (decode_graphs.h)
  DecodeGraphs graphs_;
  Tensor embed_, lm_head_;  // [V, H] checkpoint views
  Tensor final_norm_;       // [H] F32
  std::vector<DecoderLayer> layers_;
  ModelInfo info_;
};

}  // namespace

std::unique_ptr<CausalLM> load_causal_lm(const std::filesystem::path& dir, const ModelOptions& options,
                                         std::unique_ptr<DecoderOps> ops) {
  MOE_CHECK(ops != nullptr, "load_causal_lm needs the decoder's ops");
  ModelConfig config = load_model_config(dir);
  return std::make_unique<Model>(std::move(config), open_weights(dir), options, std::move(ops));
}

std::unique_ptr<CausalLM> load_causal_lm(ModelConfig config, Checkpoint checkpoint,
                                         const ModelOptions& options, std::unique_ptr<DecoderOps> ops) {
  MOE_CHECK(ops != nullptr, "load_causal_lm needs the decoder's ops");
  return std::make_unique<Model>(std::move(config), std::move(checkpoint), options, std::move(ops));
}

int64_t CausalLM::kv_memory_available() const { return host_available_memory(); }

std::vector<int32_t> CausalLM::forward_sample(std::span<const std::vector<int32_t>> new_tokens,
                                              KvCache& cache, std::span<const TokenChoice> choices,
                                              const RoutingObserver& observer) {
  for (const TokenChoice& c : choices) check_token_choice(c);
  const Tensor logits = forward(new_tokens, cache, true, observer);  // [sequences with tokens, V]
  MOE_CHECK(static_cast<int64_t>(choices.size()) == logits.size(0),
            "forward_sample: {} token choices for {} sequences with new tokens (one each)", choices.size(),
            logits.size(0));
  std::vector<int32_t> ids;
  const int64_t V = logits.size(1);
  for (int64_t r = 0; r < logits.size(0); ++r)
    ids.push_back(choose_token({logits.data_as<float>() + r * V, static_cast<size_t>(V)}, choices[r]));
  return ids;
}

std::vector<int32_t> DecoderOps::choose_tokens(const Tensor& logits, std::span<const TokenChoice> choices) {
  const Tensor host = to_host(logits);  // [n, V]
  MOE_CHECK(
      host.dim() == 2 && host.dtype() == DType::F32 && static_cast<int64_t>(choices.size()) == host.size(0),
      "choose_tokens: {} choices for logits {}", choices.size(), host.shape_string());
  std::vector<int32_t> ids;
  const int64_t V = host.size(1);
  for (int64_t r = 0; r < host.size(0); ++r)
    ids.push_back(choose_token({host.data_as<float>() + r * V, static_cast<size_t>(V)}, choices[r]));
  return ids;
}

void DecoderOps::choose_tokens_into(const Tensor& logits, std::span<const TokenChoice> choices, Tensor& ids) {
  const std::vector<int32_t> chosen = choose_tokens(logits, choices);
  MOE_CHECK(ids.device() == Device::cpu && ids.dtype() == DType::I32 && ids.numel() == static_cast<int64_t>(chosen.size()),
            "choose_tokens_into: {} ids into {} {}", chosen.size(), dtype_name(ids.dtype()), ids.shape_string());
  std::copy(chosen.begin(), chosen.end(), ids.data_as<int32_t>());
}

void DecoderOps::attention_inputs(Tensor& q, Tensor& k, const Tensor& v, const HeadNorms& norms, const Rope& rope,
                                  const AttentionShape& shape, ModelKvCache& cache, int64_t layer,
                                  const BatchLayout& batch) {
  if (norms.q.defined()) rms_norm(q, norms.q, norms.eps, shape.dk);
  if (norms.k.defined()) rms_norm(k, norms.k, norms.eps, shape.dk);
  this->rope(rope, q, shape.heads, 0, batch.positions);
  this->rope(rope, k, shape.kv_heads, 0, batch.positions);
  append_kv(cache, layer, batch, k, v);
}

std::vector<Tensor> DecoderOps::to_host_all(std::span<const Tensor> xs) {
  std::vector<Tensor> host;
  for (const Tensor& x : xs) host.push_back(to_host(x));
  return host;
}

std::unique_ptr<CausalLM> CausalLM::load(const std::filesystem::path& dir, const ModelOptions& options) {
  return load_causal_lm(dir, options, make_cpu_decoder_ops());
}

}  // namespace moe::model
