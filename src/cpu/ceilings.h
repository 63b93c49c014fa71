#pragma once
// The machine's ceilings, measured in the same run as a benchmark (shared machines drift from minute to
// minute): DRAM read bandwidth and the peak rate of the expert kernels' multiply instructions, on every
// thread of the pool.

#include <cstdint>

#include "moe/core/tensor.h"
#include "cpu/fast_experts.h"

namespace moe::cpu {

// Bytes per second reading a buffer of `bytes` (much larger than the last-level cache; every cache line
// read once per pass), split across the pool's threads; best of `passes`, each pass reading it twice: with
// the hardware prefetchers alone, and with software prefetches ahead as well.
double measure_read_bandwidth(int64_t bytes = int64_t{1} << 30, int passes = 3);

// The same probe keeping its buffer (faulted in once), for measuring again and again between timed runs.
class ReadProbe {
 public:
  explicit ReadProbe(int64_t bytes = int64_t{1} << 30);
  double measure(int passes = 1);

 private:
  Tensor buffer_;
};

// Flop/s of the ISA's dot instruction on all threads (bf16: vdpbf16ps, 64 flops each; int8: vpdpbusd,
// 128 ops each; AVX2: fp32 FMA, 16 flops each), 24 independent accumulators per thread, best of `passes`.
double measure_peak_flops(Isa isa, quant::WeightFormat format, int passes = 3);

// Flop/s of fp32 FMA on all threads (512-bit where the CPU has AVX-512F, else 256-bit), the instruction of
// the model's dense layers and attention (16 independent accumulators per thread), best of `passes`.
double measure_fp32_fma_peak(int passes = 3);

}  // namespace moe::cpu
