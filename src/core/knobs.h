#pragma once
// Every MOE_* setting of the environment, parsed in one place (docs/tuning.md says what each changes, its
// default and the measurement behind it). Parsing is strict: a value that is not one the setting takes is
// an error (moe::Error) naming the variable, what it takes and what it sets, never a silent default.
// Unset or empty means "not given" (nullopt): the code that reads a knob keeps its own default or policy.
//
// Two ways to read them, so that each knob keeps when it takes effect:
//   knobs()             the process's settings, parsed from the environment at the first call (thread-safe)
//                       and fixed after. The kernels' policies read them on every launch, where a getenv
//                       would cost more than the launch's host work, and a value that changed mid-run would
//                       make a captured CUDA graph disagree with an eager forward.
//   Knobs::from_env()   parses the environment now. Read where a layer or the CPU experts are set up
//                       (MOE_CPU_ISA, MOE_CPU_STREAM_PREFETCH, MOE_DECODE_MAX_TOKENS), so that a value
//                       changed between two layers (tests do) takes effect for the second.
// Either one parses every knob, so a bad value anywhere is reported at the first read of any.
// Free of fmt: CUDA sources include it.

#include <cstdint>
#include <optional>

namespace moe {

// A setting of the wgmma GEMMs given for both GEMMs of the experts or as <gate/up>,<down>.
template <class T>
struct PerGemm {
  std::optional<T> gate_up, down;
  const std::optional<T>& of(bool is_gate_up) const { return is_gate_up ? gate_up : down; }
};

struct Knobs {
  enum class CpuIsa { avx2, avx512, amx };
  enum class StreamPrefetch { software, hardware };
  enum class GroupedGemm { mma, wgmma };
  enum class L2Hint { normal, evict_last, evict_first };  // MOE_WGMMA_L2's normal, last, first
  struct L2Hints {
    L2Hint a, b;
  };

  // core: the thread pool (read when the process's pool starts).
  std::optional<int64_t> num_threads;   // MOE_NUM_THREADS: 1..4096 workers (default: hardware threads)
  std::optional<int64_t> pool_spin_us;  // MOE_POOL_SPIN_US: 0..1,000,000 µs an idle worker polls

  // cpu: the fast experts, and the dense linear kernels (MOE_CPU_ISA=avx2 turns their AVX-512 off).
  std::optional<CpuIsa> cpu_isa;                     // MOE_CPU_ISA: avx2, avx512 or amx
  std::optional<StreamPrefetch> cpu_stream_prefetch;  // MOE_CPU_STREAM_PREFETCH: software or hardware

  // cuda: the router, the permute, the fused decode kernel.
  std::optional<int64_t> router_rows_per_block;  // MOE_ROUTER_ROWS_PER_BLOCK: 0..8 (0: by gate size)
  std::optional<int64_t> permute_chunked_from;   // MOE_PERMUTE_CHUNKED_FROM: 1..kPermuteChunkedFromMax pairs
  std::optional<int64_t> decode_max_tokens;      // MOE_DECODE_MAX_TOKENS: 0..kDecodeMaxTokensMax (0: off)
  std::optional<int64_t> decode_prefetch;        // MOE_DECODE_PREFETCH: 0..2^30 bytes
  std::optional<int64_t> skinny_gemm_max_rows;   // MOE_SKINNY_GEMM_MAX_ROWS: 0..8 (0: cuBLASLt at any rows)

  // cuda: the grouped GEMMs' plan (tile height, kernel, tuned table).
  std::optional<int64_t> tile_rows;            // MOE_TILE_ROWS: 0..128 (0: by rows per expert)
  std::optional<int64_t> decode_wide_k;        // MOE_DECODE_WIDE_K: 0..2^30
  std::optional<GroupedGemm> grouped_gemm;     // MOE_GROUPED_GEMM: mma or wgmma
  std::optional<bool> tuned_tiles;             // MOE_TUNED_TILES: on or off

  // cuda: the wgmma kernel's schedule.
  std::optional<bool> wgmma_tall;                 // MOE_WGMMA_TALL
  std::optional<bool> wgmma_even_tiles;           // MOE_WGMMA_EVEN_TILES
  std::optional<bool> wgmma_half_tiles;           // MOE_WGMMA_HALF_TILES
  std::optional<bool> wgmma_claim;                // MOE_WGMMA_CLAIM
  std::optional<bool> wgmma_pairs;                // MOE_WGMMA_PAIRS
  std::optional<bool> wgmma_sector_stores;        // MOE_WGMMA_SECTOR_STORES
  PerGemm<int> wgmma_raster_rows;                 // MOE_WGMMA_RASTER_ROWS: N or <gate/up>,<down>, each 1..64
  std::optional<L2Hints> wgmma_l2;                // MOE_WGMMA_L2: <A>,<B>, each normal, last or first
  PerGemm<bool> wgmma_staged_epilogue;            // MOE_WGMMA_STAGED_EPILOGUE: on|off or <gate/up>,<down>
  PerGemm<bool> wgmma_column_pairs;               // MOE_WGMMA_COLUMN_PAIRS: on|off or <gate/up>,<down>

  // The environment's settings now (throws moe::Error on a bad value).
  static Knobs from_env();
};

// MOE_PERMUTE_CHUNKED_FROM's largest value: one more than the pairs the one-launch permute takes
// (src/cuda/permute.cu checks that the two agree).
constexpr int64_t kPermuteChunkedFromMax = 16385;
// MOE_DECODE_MAX_TOKENS's largest value: the fused decode kernel's most tokens (cuda::kDecodeMaxTokens).
constexpr int64_t kDecodeMaxTokensMax = 8;

// The process's settings: Knobs::from_env() at the first call, the same object after.
const Knobs& knobs();

}  // namespace moe
