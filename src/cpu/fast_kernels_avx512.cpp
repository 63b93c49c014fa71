// AVX-512 micro-kernels of the fast CPU experts: one block of 64 weight rows × a panel of up to 6 tokens
// (bf16: up to 12, the wide panels below), 24 independent accumulators (vdpbf16ps / vpdpbusd have a latency
// of several cycles at one issue per cycle: fewer chains leave the unit idle). Layout and arguments:
// fast_kernels.h.
#include <immintrin.h>

#include <cstdint>

#include "fast_kernels.h"

// NOTE: everything below is compiled for AVX-512; only the dispatcher calls it, after checking cpuid.
// Standard headers stay above the pragma so that no inline library code is built for this target.
#pragma GCC push_options
// NOTE: GCC 12's AVX-512 intrinsics start from _mm512_undefined_*, which -Wuninitialized misreports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,fma")

#include "avx512_epilogue.h"

namespace moe::cpu {

namespace {

// How far ahead in the block stream the kernels prefetch: 4 KiB, a few DRAM latencies of streaming at this
// core's share of the bandwidth while a panel of 2-6 tokens computes (8 and 12 KiB were no faster).
constexpr int64_t kPrefetchBytes = 4096;
// Panels of 2-6 tokens (int8: 2-4; its asm loop of 5-6 keeps 4 KiB) also prefetch 16 KiB ahead into L2: an
// L1 prefetch holds a fill buffer until its line arrives, so 4 KiB ahead keeps few lines in flight, and the
// L2 queue holds more. Measured on the Xeon VM (2026-11-30), paired x floor, median of 5 runs: Qwen3
// T=8 1.15 -> 1.02, T=32 1.19 -> 1.06, T=128 1.46 -> 1.43; limited to 2-3 tokens it gained less (T=32 1.13).
constexpr int64_t kFarPrefetchBytes = 16384;
// A one-token panel runs a k-step in about 4 cycles, so 4 KiB is less than a DRAM latency ahead: 8 KiB.
// Two cores streaming 512 KiB blocks: 22.9-25.0 GB/s against 15.4-19.7 at 4 KiB (Xeon VM, 2026-11-30). On
// Zen 4 (hardware prefetch) one-token panels issue none either: without them the stream ran faster in 24 of
// 24 alternated runs, 40.3 against 38.4 GB/s (medians; 2026-12-01).
constexpr int64_t kDecodePrefetchBytes = 8192;

// The k-loop of a panel of N = 5 or 6 tokens: acc[r][n] = Σ_p block[p][16r .. 16r + 16] · x[n][p], with
// vdpbf16ps (bf16 pairs) or vpdpbusd (u8 activation quads × s8 weight quads).
// NOTE: one asm statement owning zmm0-28 (token n's 4 accumulators in zmm4n..4n+3, the block's 4 weight
// vectors in zmm24-27, a broadcast in zmm28), the sums stored token-major after the loop: with intrinsics
// GCC kept moving the accumulators between registers and the stack (int8: 48 zmm moves and 19 stack
// accesses a k-step at N = 6; bf16 the same), which compete with the dot products for the vector ports:
// int8 ran 1.4-1.9x slower where compute-bound (Xeon VM, 2026-11-30), bf16 at T = 128-512 reached
// 36-40% of the vdpbf16ps peak on a Zen 4 VM (2026-11-30). The assembler's .irp and a macro (moe_token,
// purged at the end so that every inlined copy may define it) write out the repetition.
struct DotAsmArgs {
  const void* w;  // the block stream
  int64_t steps;  // k pairs (bf16) or quads (int8)
  const uint32_t* x[6];
};
// Token n of the panel: its pointer's register and its 4 accumulators' numbers.
#define MOE_ASM_TOKEN(ptr, accumulators) "moe_token " ptr ", " accumulators "\n\t"
// With software prefetch: kPrefetchBytes ahead into L1, and for bf16 also kFarPrefetchBytes ahead into L2
// (int8 panels of 5-6 keep 4 KiB only).
#define MOE_ASM_NEAR_PREFETCH ".irp l, 0, 1, 2, 3\n\tprefetcht0 4096+64*\\l(%%rax)\n\t.endr\n\t"
#define MOE_ASM_FAR_PREFETCH ".irp l, 0, 1, 2, 3\n\tprefetcht1 16384+64*\\l(%%rax)\n\t.endr\n\t"
#define MOE_ASM_LOOP(OP, PREFETCH, TOKENS, ACCUMULATORS, out)                                          \
  asm volatile(                                                                                          \
      ".macro moe_token ptr, a0, a1, a2, a3\n\t"                                                         \
      "vpbroadcastd (\\ptr,%%rdx,4), %%zmm28\n\t"                                                        \
      OP " %%zmm24, %%zmm28, %%zmm\\a0\n\t"                                                              \
      OP " %%zmm25, %%zmm28, %%zmm\\a1\n\t"                                                              \
      OP " %%zmm26, %%zmm28, %%zmm\\a2\n\t"                                                              \
      OP " %%zmm27, %%zmm28, %%zmm\\a3\n\t"                                                              \
      ".endm\n\t"                                                                                        \
      ".irp i, " ACCUMULATORS "\n\tvpxord %%zmm\\i, %%zmm\\i, %%zmm\\i\n\t.endr\n\t"                    \
      "mov 0(%[a]), %%rax\n\tmov 8(%[a]), %%rcx\n\t"                                                     \
      "mov 16(%[a]), %%r8\n\tmov 24(%[a]), %%r9\n\tmov 32(%[a]), %%r10\n\t"                              \
      "mov 40(%[a]), %%r11\n\tmov 48(%[a]), %%r12\n\tmov 56(%[a]), %%r13\n\t"                            \
      "xor %%edx, %%edx\n\ttest %%rcx, %%rcx\n\tjz 2f\n\t"                                               \
      "1:\n\t"                                                                                           \
      PREFETCH                                                                                           \
      "vmovdqu64 0(%%rax), %%zmm24\n\tvmovdqu64 64(%%rax), %%zmm25\n\t"                                  \
      "vmovdqu64 128(%%rax), %%zmm26\n\tvmovdqu64 192(%%rax), %%zmm27\n\t" TOKENS                        \
      "add $256, %%rax\n\tinc %%rdx\n\tcmp %%rcx, %%rdx\n\tjne 1b\n\t"                                   \
      "2:\n\t"                                                                                           \
      ".irp i, " ACCUMULATORS "\n\tvmovdqu64 %%zmm\\i, 64*\\i(%[o])\n\t.endr\n\t"                       \
      ".purgem moe_token"                                                                                \
      :                                                                                                  \
      : [a] "r"(&a), [o] "r"(out)                                                                        \
      : "rax", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "cc", "memory", "xmm0", "xmm1",       \
        "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",   \
        "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",   \
        "xmm25", "xmm26", "xmm27", "xmm28")
#define MOE_ASM_TOKENS_5                                                                                  \
  MOE_ASM_TOKEN("%%r8", "0, 1, 2, 3") MOE_ASM_TOKEN("%%r9", "4, 5, 6, 7") MOE_ASM_TOKEN("%%r10", "8, 9, 10, 11") \
  MOE_ASM_TOKEN("%%r11", "12, 13, 14, 15") MOE_ASM_TOKEN("%%r12", "16, 17, 18, 19")
#define MOE_ASM_TOKENS_6 MOE_ASM_TOKENS_5 MOE_ASM_TOKEN("%%r13", "20, 21, 22, 23")
#define MOE_ASM_ACCUMULATORS_5 "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19"
#define MOE_ASM_ACCUMULATORS_6 MOE_ASM_ACCUMULATORS_5 ", 20, 21, 22, 23"

template <int N, bool kBf16, bool kSoftwarePrefetch>
[[gnu::always_inline]] inline void dot_asm(__m512i (&acc)[kTiles][N], const DotAsmArgs& a) {
  static_assert(N == 5 || N == 6, "the asm k-loop takes panels of 5 or 6 tokens");
  static_assert(kPrefetchBytes == 4096 && kFarPrefetchBytes == 16384, "the asm k-loop's prefetch distances");
  __m512i token_major[N][kTiles];
  // The loop for this N with a given dot instruction and prefetch.
#define MOE_ASM_PANEL(OP, PREFETCH)                                                           \
  if constexpr (N == 5) {                                                                     \
    MOE_ASM_LOOP(OP, PREFETCH, MOE_ASM_TOKENS_5, MOE_ASM_ACCUMULATORS_5, token_major);        \
  } else {                                                                                    \
    MOE_ASM_LOOP(OP, PREFETCH, MOE_ASM_TOKENS_6, MOE_ASM_ACCUMULATORS_6, token_major);        \
  }
  if constexpr (kBf16 && kSoftwarePrefetch) {
    MOE_ASM_PANEL("vdpbf16ps", MOE_ASM_NEAR_PREFETCH MOE_ASM_FAR_PREFETCH)
  } else if constexpr (kBf16) {
    MOE_ASM_PANEL("vdpbf16ps", "")
  } else if constexpr (kSoftwarePrefetch) {
    MOE_ASM_PANEL("vpdpbusd", MOE_ASM_NEAR_PREFETCH)
  } else {
    MOE_ASM_PANEL("vpdpbusd", "")
  }
#undef MOE_ASM_PANEL
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n)
#pragma GCC unroll 4
    for (int r = 0; r < kTiles; ++r) acc[r][n] = token_major[n][r];
}
#undef MOE_ASM_ACCUMULATORS_6
#undef MOE_ASM_ACCUMULATORS_5
#undef MOE_ASM_TOKENS_6
#undef MOE_ASM_TOKENS_5
#undef MOE_ASM_LOOP
#undef MOE_ASM_FAR_PREFETCH
#undef MOE_ASM_NEAR_PREFETCH
#undef MOE_ASM_TOKEN

// acc[r][n] = Σ_p block[p][16r .. 16r + 16] · x[n][p] over k pairs (bf16) or quads (int8). Without software
// prefetch (StreamPrefetch), panels issue no prefetches at all.
template <int N, bool kBf16, bool kSoftwarePrefetch, class W>
[[gnu::always_inline]] inline void dot_block(const W* w, int64_t k_steps, const uint32_t* const* x_in,
                                             __m512i (&acc)[kTiles][N]) {
  if constexpr (N >= 5) {
    DotAsmArgs args{.w = w, .steps = k_steps, .x = {}};
    for (int n = 0; n < N; ++n) args.x[n] = x_in[n];
    dot_asm<N, kBf16, kSoftwarePrefetch>(acc, args);
  } else {
    const uint32_t* x[N];
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) x[n] = x_in[n];
#pragma GCC unroll 8
    for (int r = 0; r < kTiles; ++r)
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_si512();
    const char* stream = reinterpret_cast<const char*>(w);
    for (int64_t p = 0; p < k_steps; ++p, stream += kBlockRows * 4) {
      if constexpr (kSoftwarePrefetch) {
        // NOTE: weights come from DRAM once per forward (decode) or once per block (prefill, while the
        // panel computes): fetching them ahead overlaps the stream with the math (1.3-1.5x at T = 32-128 on
        // a Xeon VM, 2026-11-29 and 30; on Zen 4 the hardware prefetcher does it better, for one token too).
#pragma GCC unroll 4
        for (int line = 0; line < 4; ++line)
          _mm_prefetch(stream + (N == 1 ? kDecodePrefetchBytes : kPrefetchBytes) + 64 * line, _MM_HINT_T0);
        if constexpr (N > 1) {
#pragma GCC unroll 4
          for (int line = 0; line < 4; ++line) _mm_prefetch(stream + kFarPrefetchBytes + 64 * line, _MM_HINT_T1);
        }
      }
      __m512i wv[kTiles];
#pragma GCC unroll 8
      for (int r = 0; r < kTiles; ++r) wv[r] = _mm512_loadu_si512(stream + 64 * r);
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) {
        const __m512i b = _mm512_set1_epi32(static_cast<int>(x[n][p]));
#pragma GCC unroll 8
        for (int r = 0; r < kTiles; ++r) {
          if constexpr (kBf16)
            acc[r][n] = _mm512_castps_si512(
                _mm512_dpbf16_ps(_mm512_castsi512_ps(acc[r][n]), (__m512bh)wv[r], (__m512bh)b));
          else
            acc[r][n] = _mm512_dpbusd_epi32(acc[r][n], b, wv[r]);  // u8 activations × s8 weights
        }
      }
    }
  }
}

// Wide panels (bf16, 7-12 tokens): one pass over the block with every token, in chunks of kWideChunkSteps k
// pairs; a chunk runs rows 0-31 (tiles 0-1) for all tokens, then rows 32-63 (tiles 2-3), so that a half's two
// accumulators a token fit the register file (2 x 12 + 3 zmm), and the other half's wait in memory. Each half
// prefetches half of the next chunk (contiguous bytes) into L2, so that the stream from DRAM runs under both
// halves' math.
// NOTE: at 7-12 tokens an expert the math and the weight stream take about equal time on 2 Zen 4 cores
// (Mixtral T=32, Qwen3 T=128); the 6 + n split streamed the block during the 6-token pass only and read it
// from cache for the second with DRAM idle (2026-12-01). Measured (2026-12-01): Mixtral T=32 1.40 -> 1.31x
// its floor in the fast memory state, even in the slow one.
constexpr int64_t kWideChunkSteps = 64;  // 16 KiB of the block stream
struct WideHalfArgs {
  const void* w;         // the half's first line at the chunk's first k pair
  int64_t neg_steps;     // -(k pairs in the chunk)
  const void* prefetch;  // where this half's prefetches into L2 start: its half of the next chunk's bytes
  // Each token's pairs, at the chunk's end (the loop indexes from -steps to 0).
  const uint32_t* x[kMaxWidePanel];
};
// Token n of a wide panel: its pointer's slot in WideHalfArgs and its 2 accumulators' numbers.
#define MOE_WIDE_TOKEN(n, a0, a1) "moe_wtoken " #n ", " #a0 ", " #a1 "\n\t"
#define MOE_WIDE_TOKENS_7                                                                                   \
  MOE_WIDE_TOKEN(0, 0, 1) MOE_WIDE_TOKEN(1, 2, 3) MOE_WIDE_TOKEN(2, 4, 5) MOE_WIDE_TOKEN(3, 6, 7)           \
  MOE_WIDE_TOKEN(4, 8, 9) MOE_WIDE_TOKEN(5, 10, 11) MOE_WIDE_TOKEN(6, 12, 13)
#define MOE_WIDE_TOKENS_8 MOE_WIDE_TOKENS_7 MOE_WIDE_TOKEN(7, 14, 15)
#define MOE_WIDE_TOKENS_9 MOE_WIDE_TOKENS_8 MOE_WIDE_TOKEN(8, 16, 17)
#define MOE_WIDE_TOKENS_10 MOE_WIDE_TOKENS_9 MOE_WIDE_TOKEN(9, 18, 19)
#define MOE_WIDE_TOKENS_11 MOE_WIDE_TOKENS_10 MOE_WIDE_TOKEN(10, 20, 21)
#define MOE_WIDE_TOKENS_12 MOE_WIDE_TOKENS_11 MOE_WIDE_TOKEN(11, 22, 23)
#define MOE_WIDE_ACCUMULATORS_7 "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13"
#define MOE_WIDE_ACCUMULATORS_8 MOE_WIDE_ACCUMULATORS_7 ", 14, 15"
#define MOE_WIDE_ACCUMULATORS_9 MOE_WIDE_ACCUMULATORS_8 ", 16, 17"
#define MOE_WIDE_ACCUMULATORS_10 MOE_WIDE_ACCUMULATORS_9 ", 18, 19"
#define MOE_WIDE_ACCUMULATORS_11 MOE_WIDE_ACCUMULATORS_10 ", 20, 21"
#define MOE_WIDE_ACCUMULATORS_12 MOE_WIDE_ACCUMULATORS_11 ", 22, 23"
// One half of one chunk: the half's sums (zmm 2n, 2n + 1 of token n, 64 bytes apart in `sums`) loaded, the
// k-loop over the chunk, the sums stored back. The half's 2 weight vectors in zmm24-25, a broadcast in zmm26.
#define MOE_WIDE_HALF(TOKENS, ACCUMULATORS)                                                              \
  asm volatile(                                                                                          \
      ".macro moe_wtoken n, a0, a1\n\t"                                                                  \
      "mov 24+8*\\n(%[a]), %%r8\n\t"                                                                    \
      "vpbroadcastd (%%r8,%%rdx,4), %%zmm26\n\t"                                                         \
      "vdpbf16ps %%zmm24, %%zmm26, %%zmm\\a0\n\t"                                                        \
      "vdpbf16ps %%zmm25, %%zmm26, %%zmm\\a1\n\t"                                                        \
      ".endm\n\t"                                                                                        \
      ".irp i, " ACCUMULATORS "\n\tvmovups 64*\\i(%[s]), %%zmm\\i\n\t.endr\n\t"                      \
      "mov 0(%[a]), %%rax\n\tmov 8(%[a]), %%rdx\n\tmov 16(%[a]), %%r9\n\t"                              \
      "test %%rdx, %%rdx\n\tjz 2f\n\t"                                                                  \
      "1:\n\t"                                                                                           \
      "prefetcht1 (%%r9)\n\tprefetcht1 64(%%r9)\n\tadd $128, %%r9\n\t"                                 \
      "vmovdqu64 0(%%rax), %%zmm24\n\tvmovdqu64 64(%%rax), %%zmm25\n\t" TOKENS                           \
      "add $256, %%rax\n\tinc %%rdx\n\tjnz 1b\n\t"                                                      \
      "2:\n\t"                                                                                           \
      ".irp i, " ACCUMULATORS "\n\tvmovups %%zmm\\i, 64*\\i(%[s])\n\t.endr\n\t"                      \
      ".purgem moe_wtoken"                                                                               \
      :                                                                                                  \
      : [a] "r"(&args), [s] "r"(sums)                                                                    \
      : "rax", "rdx", "r8", "r9", "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",  \
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",      \
        "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26")

template <int N>
[[gnu::always_inline]] inline void wide_half(const WideHalfArgs& args, float* sums) {
  static_assert(N >= 7 && N <= kMaxWidePanel, "wide panels hold 7-12 tokens");
  if constexpr (N == 7) MOE_WIDE_HALF(MOE_WIDE_TOKENS_7, MOE_WIDE_ACCUMULATORS_7);
  if constexpr (N == 8) MOE_WIDE_HALF(MOE_WIDE_TOKENS_8, MOE_WIDE_ACCUMULATORS_8);
  if constexpr (N == 9) MOE_WIDE_HALF(MOE_WIDE_TOKENS_9, MOE_WIDE_ACCUMULATORS_9);
  if constexpr (N == 10) MOE_WIDE_HALF(MOE_WIDE_TOKENS_10, MOE_WIDE_ACCUMULATORS_10);
  if constexpr (N == 11) MOE_WIDE_HALF(MOE_WIDE_TOKENS_11, MOE_WIDE_ACCUMULATORS_11);
  if constexpr (N == 12) MOE_WIDE_HALF(MOE_WIDE_TOKENS_12, MOE_WIDE_ACCUMULATORS_12);
}
#undef MOE_WIDE_HALF
#undef MOE_WIDE_ACCUMULATORS_12
#undef MOE_WIDE_ACCUMULATORS_11
#undef MOE_WIDE_ACCUMULATORS_10
#undef MOE_WIDE_ACCUMULATORS_9
#undef MOE_WIDE_ACCUMULATORS_8
#undef MOE_WIDE_ACCUMULATORS_7
#undef MOE_WIDE_TOKENS_12
#undef MOE_WIDE_TOKENS_11
#undef MOE_WIDE_TOKENS_10
#undef MOE_WIDE_TOKENS_9
#undef MOE_WIDE_TOKENS_8
#undef MOE_WIDE_TOKENS_7
#undef MOE_WIDE_TOKEN

// acc[r][n] = Σ_p block[p][16r .. 16r + 16] · x[n][p] over k pairs, as dot_block, for a wide panel.
template <int N>
[[gnu::always_inline]] inline void dot_wide(const uint16_t* w, int64_t k_pairs, const uint32_t* const* x,
                                            __m512i (&acc)[kTiles][N]) {
  alignas(64) float sums[2][N][2][16] = {};  // [half][token][tile of the half]
  WideHalfArgs args{};
  const char* const block = reinterpret_cast<const char*>(w);
  for (int64_t p0 = 0; p0 < k_pairs; p0 += kWideChunkSteps) {
    const int64_t steps = k_pairs - p0 < kWideChunkSteps ? k_pairs - p0 : kWideChunkSteps;
    args.neg_steps = -steps;
    for (int n = 0; n < N; ++n) args.x[n] = x[n] + p0 + steps;
    for (int half = 0; half < 2; ++half) {
      args.w = block + p0 * kBlockRows * 4 + half * 2 * 64;
      // The next chunk is one contiguous stretch: each half prefetches its own half of it, 2 lines a k pair.
      args.prefetch = block + (p0 + kWideChunkSteps) * kBlockRows * 4 + half * kWideChunkSteps * 2 * 64;
      wide_half<N>(args, &sums[half][0][0][0]);
    }
  }
#pragma GCC unroll 12
  for (int n = 0; n < N; ++n)
#pragma GCC unroll 4
    for (int r = 0; r < kTiles; ++r) acc[r][n] = _mm512_load_si512(sums[r / 2][n][r % 2]);
}

// WIDE: a wide panel's k-loop (dot_wide) in place of dot_block's.
template <int N, bool P, bool WIDE = false>
void gate_up_bf16(const GateUpBf16Args& a) {
  __m512i acc[kTiles][N];
  if constexpr (WIDE) {
    dot_wide<N>(a.w, a.k_pairs, a.x, acc);
  } else {
    dot_block<N, true, P>(a.w, a.k_pairs, a.x, acc);
  }
#pragma GCC unroll 12
  for (int n = 0; n < N; ++n) {
    const __m512 h0 = silu_mul_ps(_mm512_castsi512_ps(acc[0][n]), _mm512_castsi512_ps(acc[2][n]));
    const __m512 h1 = silu_mul_ps(_mm512_castsi512_ps(acc[1][n]), _mm512_castsi512_ps(acc[3][n]));
    _mm512_storeu_si512(a.act[n], (__m512i)_mm512_cvtne2ps_pbh(h1, h0));  // RNE; h0 in the low half
  }
}

template <int N, bool P, bool WIDE = false>
void down_bf16(const DownBf16Args& a) {
  __m512i acc[kTiles][N];
  if constexpr (WIDE) {
    dot_wide<N>(a.w, a.k_pairs, a.x, acc);
  } else {
    dot_block<N, true, P>(a.w, a.k_pairs, a.x, acc);
  }
#pragma GCC unroll 12
  for (int n = 0; n < N; ++n) {
    const __m512 v[kTiles] = {_mm512_castsi512_ps(acc[0][n]), _mm512_castsi512_ps(acc[1][n]),
                              _mm512_castsi512_ps(acc[2][n]), _mm512_castsi512_ps(acc[3][n])};
    add_scaled_rows(a.out[n], v, a.weight[n], a.valid_rows);
  }
}

template <int N, bool P>
void gate_up_int8(const GateUpInt8Args& a) {
  __m512i acc[kTiles][N];
  dot_block<N, false, P>(a.w, a.k_quads, a.x, acc);
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) {
    __m512 v[kTiles];
#pragma GCC unroll 8
    for (int r = 0; r < kTiles; ++r) v[r] = dequant(acc[r][n], a.w_scale, a.w_comp, r, a.x_scale[n]);
    _mm512_storeu_ps(a.act[n], silu_mul_ps(v[0], v[2]));
    _mm512_storeu_ps(a.act[n] + 16, silu_mul_ps(v[1], v[3]));
  }
}

template <int N, bool P>
void down_int8(const DownInt8Args& a) {
  __m512i acc[kTiles][N];
  dot_block<N, false, P>(a.w, a.k_quads, a.x, acc);
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) {
    __m512 v[kTiles];
#pragma GCC unroll 8
    for (int r = 0; r < kTiles; ++r) v[r] = dequant(acc[r][n], a.w_scale, a.w_comp, r, a.x_scale[n]);
    add_scaled_rows(a.out[n], v, a.weight[n], a.valid_rows);
  }
}

// One switch turns the panel size into the template parameter.
template <template <int, bool> class K, bool P, class Args>
void by_panel(const Args& a) {
  switch (a.n) {
    case 1: return K<1, P>::run(a);
    case 2: return K<2, P>::run(a);
    case 3: return K<3, P>::run(a);
    case 4: return K<4, P>::run(a);
    case 5: return K<5, P>::run(a);
    default: return K<6, P>::run(a);
  }
}
template <int N, bool P> struct GateUpBf16 { static void run(const GateUpBf16Args& a) { gate_up_bf16<N, P>(a); } };
template <int N, bool P> struct DownBf16 { static void run(const DownBf16Args& a) { down_bf16<N, P>(a); } };
template <int N, bool P> struct GateUpInt8 { static void run(const GateUpInt8Args& a) { gate_up_int8<N, P>(a); } };
template <int N, bool P> struct DownInt8 { static void run(const DownInt8Args& a) { down_int8<N, P>(a); } };

// bf16 panels of 7-12 tokens take the wide kernels, the rest by_panel. The wide k-loop always prefetches: the
// hardware prefetcher does not follow its half-row pattern (without, Mixtral T=32 ran 2.6x its floor on Zen 4;
// 2026-12-01).
template <template <int> class Wide, template <int, bool> class K, bool P, class Args>
void by_wide_panel(const Args& a) {
  switch (a.n) {
    case 7: return Wide<7>::run(a);
    case 8: return Wide<8>::run(a);
    case 9: return Wide<9>::run(a);
    case 10: return Wide<10>::run(a);
    case 11: return Wide<11>::run(a);
    case 12: return Wide<12>::run(a);
    default: return by_panel<K, P, Args>(a);
  }
}
template <int N>
struct GateUpBf16Wide {
  static void run(const GateUpBf16Args& a) { gate_up_bf16<N, true, /*WIDE=*/true>(a); }
};
template <int N>
struct DownBf16Wide {
  static void run(const DownBf16Args& a) { down_bf16<N, true, /*WIDE=*/true>(a); }
};

template <bool kSoftwarePrefetch>
const KernelTable& kernels() {
  static const KernelTable table{
      .panel = kMaxPanel,
      .wide_panel = kMaxWidePanel,
      .tile_panel = 0,
      .gate_up_bf16 = &by_wide_panel<GateUpBf16Wide, GateUpBf16, kSoftwarePrefetch, GateUpBf16Args>,
      .down_bf16 = &by_wide_panel<DownBf16Wide, DownBf16, kSoftwarePrefetch, DownBf16Args>,
      .gate_up_int8 = &by_panel<GateUpInt8, kSoftwarePrefetch, GateUpInt8Args>,
      .down_int8 = &by_panel<DownInt8, kSoftwarePrefetch, DownInt8Args>,
  };
  return table;
}

}  // namespace

const KernelTable& avx512_kernels(StreamPrefetch prefetch) {
  return prefetch == StreamPrefetch::software ? kernels<true>() : kernels<false>();
}

}  // namespace moe::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
