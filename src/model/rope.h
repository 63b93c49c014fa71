#pragma once
// Rotary position embeddings as transformers 5.17 computes them (modeling_rope_utils.py and each family's
// apply_rotary_pos_emb): inverse frequencies for the default and YaRN types, cos/sin in fp32 scaled by the
// attention factor, and the three pairings of a head's dimensions (RopeLayout).

#include <cstdint>
#include <vector>

#include "moe/model/model_config.h"

namespace moe::model {

class Rope {
 public:
  explicit Rope(const RopeConfig& config);

  // Rotates one head's rotary part x[0, dim) in place for position `pos`.
  void apply(float* x, int64_t pos) const;

  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  RopeConfig config_;
  std::vector<float> inv_freq_;  // [dim / 2]
};

}  // namespace moe::model
