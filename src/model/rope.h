#pragma once
// The rotary frequency table as transformers 5.17 computes it (modeling_rope_utils.py): inverse frequencies
// for the default and YaRN types, the attention factor that scales cos/sin, and the pairing of a head's
// dimensions (RopeLayout). The rotation itself is an op of the backend (cpu/rope.h on the CPU).

#include <cstdint>
#include <vector>

#include "cpu/rope.h"
#include "moe/model/model_config.h"

namespace moe::model {

class Rope {
 public:
  explicit Rope(const RopeConfig& config);

  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // The table the CPU rotation reads (a view of this object's frequencies).
  cpu::RopeTable cpu_table() const;

 private:
  RopeConfig config_;
  std::vector<float> inv_freq_;  // [dim / 2]
};

}  // namespace moe::model
