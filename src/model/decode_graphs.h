#pragma once
// The decode steps a device's ops record (CUDA graphs), one per bucket of rows: a step of n sequences, one
// new token each, replays the recording of the smallest bucket that holds n, its extra rows padding (copies
// of the first row that write nothing to the cache: BatchLayout::Span::pad). Each recording writes its
// chosen ids and every MoE layer's routing into outputs of its own, read back after the replay.

#include <cstdint>
#include <map>
#include <memory>
#include <span>

#include "decoder_ops.h"

namespace moe::model {

// The buckets a step's rows round up to: every size up to 4 (the skinny GEMM's rows), then steps of 8 to
// 64 and of 32 to 256; a larger step runs without a recording.
std::span<const int64_t> decode_graph_buckets();
// The smallest bucket of at least `rows` rows, or 0 when none holds them.
int64_t decode_graph_bucket(int64_t rows);

struct DecodeGraph {
  std::unique_ptr<RecordedStep> step;
  Tensor ids;              // [bucket] I32 the chosen tokens (-1: the row's logits were not finite)
  Tensor routing_ids;      // [moe layers, bucket, k] I32
  Tensor routing_weights;  // [moe layers, bucket, k] F32
};

// The recordings of one cache's steps (each reads and writes its pool): a step on another cache drops them.
class DecodeGraphs {
 public:
  DecodeGraph* find(int64_t cache_serial, int64_t bucket) {
    if (cache_serial != cache_serial_) {
      graphs_.clear();
      cache_serial_ = cache_serial;
    }
    const auto it = graphs_.find(bucket);
    return it == graphs_.end() ? nullptr : &it->second;
  }
  DecodeGraph& add(int64_t bucket, DecodeGraph graph) { return graphs_[bucket] = std::move(graph); }
  int64_t size() const { return static_cast<int64_t>(graphs_.size()); }

 private:
  int64_t cache_serial_ = 0;
  std::map<int64_t, DecodeGraph> graphs_;
};

}  // namespace moe::model
