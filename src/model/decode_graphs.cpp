#include "decode_graphs.h"

#include <algorithm>
#include <array>

namespace moe::model {

namespace {

constexpr std::array<int64_t, 18> kBuckets = {1,  2,  3,  4,  8,  16, 24,  32,  40,
                                              48, 56, 64, 96, 128, 160, 192, 224, 256};

}  // namespace

std::span<const int64_t> decode_graph_buckets() { return kBuckets; }

int64_t decode_graph_bucket(int64_t rows) {
  const auto it = std::lower_bound(kBuckets.begin(), kBuckets.end(), rows);
  return rows < 1 || it == kBuckets.end() ? 0 : *it;
}

}  // namespace moe::model
