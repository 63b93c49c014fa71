#pragma once
// Optimised CPU experts (the reference ops in ops.h stay the oracle). Weights are repacked once, at load,
// into the layout the micro-kernels read as one stream; a forward is then three passes over the thread pool:
//   0. the tokens' hidden states are rounded to bf16 (or quantised to int8 per token), once per token;
//   1. gate and up as one pass over each touched expert (work items (expert, 32 intermediate rows) split
//      across threads by estimated time, not by index), SwiGLU fused into the epilogue;
//   2. down, the threads splitting the hidden dimension, each expert's result accumulated straight into
//      its tokens' output rows with the routing weight (no [rows, H] intermediate, no unpermute pass;
//      a token's experts are added in expert order, so the result does not depend on the thread count).
// ISA: AMX tiles (tdpbf16ps, tdpbusd) where the CPU and the OS allow them, AVX-512 with vdpbf16ps
// (bf16) / vpdpbusd (int8) where the CPU has them, AVX2+FMA otherwise, chosen at run time; MOE_CPU_ISA
// forces one (tests run every path the machine has).

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "moe/core/expert_batch.h"
#include "moe/quant/weight_format.h"

namespace moe::cpu {

enum class Isa : uint8_t {
  avx512,  // AVX-512 F/BW/VL + BF16 (+ VNNI for int8 weights)
  avx2,    // AVX2 + FMA (int8: portable loops)
  amx,     // AMX-BF16 / AMX-INT8 tiles (panels of up to 16 tokens), epilogues as avx512
};

// The best ISA this CPU runs, unless MOE_CPU_ISA (avx2 | avx512 | amx) asks for another; asking for one the
// CPU lacks is an error.
Isa detect_isa();
// How the AVX-512 and AMX kernels keep a weight block streaming: software prefetches ahead of their loads (what a
// Xeon VM needed), or none, leaving it to the hardware prefetcher, which on AMD Zen 4 streams faster than
// with them: 7-12% under panels of several tokens (2026-11-30), 3-7% at one token (2026-12-01). The AVX2
// kernels ignore it.
enum class StreamPrefetch : uint8_t { software, hardware };
// hardware on AMD CPUs, software on others, unless MOE_CPU_STREAM_PREFETCH (software | hardware) asks.
StreamPrefetch detect_stream_prefetch();
std::string_view stream_prefetch_name(StreamPrefetch prefetch);
// Whether this CPU has AMX tiles with BF16 and INT8 (and AVX-512 BF16 for the epilogues) and the OS lets this
// process use them: the first call asks Linux for the tile data state (arch_prctl), once per process.
bool amx_usable();
// Whether this CPU runs the fast experts at all (AVX2 + FMA); callers fall back to the reference ops if not.
bool fast_experts_available();
std::string_view isa_name(Isa isa);

// One SwiGLU MLP repacked for the kernels (opaque to callers).
struct PackedExpert;
using PackedExpertPtr = std::shared_ptr<const PackedExpert>;

// Repacks gate [I, H], up [I, H], down [H, I] (F32, BF16 or F16; row-contiguous views allowed). Single-
// threaded: callers pack several experts in parallel (pack_experts).
PackedExpertPtr pack_expert(const SwigluWeights& weights, quant::WeightFormat format);
// Packs every expert on the thread pool; experts whose three tensors are the same views as an earlier
// expert's share its packed copy.
std::vector<PackedExpertPtr> pack_experts(std::span<const SwigluWeights> experts, quant::WeightFormat format);
// Bytes of packed weights one forward reads for this expert (for bandwidth figures).
int64_t packed_weight_bytes(const PackedExpert& expert);

// The rows one expert runs on: out[token[i]] += weight[i] · expert(x[token[i]]) for i in [0, count).
// A token appears at most once per segment.
struct ExpertRows {
  const PackedExpert* expert;
  const int32_t* token;  // [count]
  const float* weight;   // [count]
  int64_t count;
};

// Runs the segments on x [T, H] F32 and adds into out [T, H] F32. Segments are added in their order for
// each token. Every expert must have the hidden size H and one format.
void fused_swiglu_experts(std::span<const ExpertRows> segments, const Tensor& x, Tensor& out, Isa isa,
                          StreamPrefetch prefetch);

// Router logits x · gate_weightᵀ with the reference's precision (fp64 accumulation, one rounding to fp32),
// vectorised and blocked over tokens. x [T, H] F32, gate_weight [E, H] F32 or BF16 (contiguous) -> [T, E] F32.
Tensor router_logits_fast(const Tensor& x, const Tensor& gate_weight);

}  // namespace moe::cpu
