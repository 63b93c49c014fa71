// A probe for issue 3's open point, Mixtral T=32 (8 tokens an expert): in the fast memory state its gate/up
// pass streams ~41 GB/s against a read probe of 55-61, because each 64-row block runs as a 6-token panel
// (streaming from DRAM) and then a 2-token panel (from L2, with DRAM idle). Can one pass with all 8 tokens
// keep both the stream and vdpbf16ps busy? 64 rows x 8 tokens would need 32 accumulators and leave no
// register for the weights, so this tries blocks of 48 rows (3 tiles x 8 tokens = 24 accumulators, 3 weight
// registers, 1 broadcast), against the library's own kernels on 64-row blocks (6 + 2), alternated in one
// process over 1 GiB of cold weights on huge pages (K = 4096, Mixtral's gate/up blocks), 2 threads:
//   lib 6+2      moe::cpu::avx512_kernels(hardware prefetch).gate_up_bf16, n = 6 then n = 2, per 64-row block;
//   lib 6+2 sw   the same with the library's software prefetch (t0 4 KiB and t1 16 KiB ahead)
//   lib wide 8   the library's wide panel (20th session): n = 8 in one call, one pass by 32-row halves
//   8x48 ...     one pass, 8 tokens, over 48-row blocks [k pairs][48 rows][2] (sums stored, no SwiGLU), with no
//                software prefetch or prefetcht0 / t1 / t2 of the k-step's 3 lines 1-16 KiB ahead
//   read         every cache line loaded (vpxord from memory), the read ceiling
//   6+2 chunks   the library's split on 64-row blocks in asm, walked in chunks of 32-512 k-steps (the 2-token
//                pass reruns each chunk from cache), the L2 prefetches shared between the two passes
//   ... warm     lib 6+2 and 8x48 again, every pass over the thread's first block (in L2): the math's own rate
// Prints each round's GB/s of weights (x 8 = GFLOP/s of the 8 tokens' dot products), then the medians. This
// VM's memory switches between a slow state (read ~35 GB/s) and a fast one (55-60) from minute to minute:
// compare variants within a round. Measured (bench/RESULTS.md, 19th session): in the fast state 8x48 with
// prefetcht1 8 KiB streamed 49-54 GB/s against lib 6+2's 37.7-39.1; in the layer, with 48-row blocks for every
// bf16 panel, Mixtral T=32 gained only 5-7% and lighter panels lost up to 7%, so the library kept its layout.
// Build (here, after the library): g++ -O2 -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -pthread
//   -Iinclude -Isrc/cpu scripts/cpu/panel_probe.cpp build/src/cpu/libmoe_cpu.a build/src/core/libmoe_core.a
//   -lfmt -o /tmp/panel_probe
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "fast_kernels.h"

namespace {

constexpr int64_t kK = 4096, kPairs = kK / 2, kTokens = 8;
constexpr size_t kBytes = size_t{1} << 30;

// 8 tokens x 48 rows over k_pairs: acc[tile][token] stored token-major into out[8][3][16] floats.
// What the probe's asm k-loops overwrite: the pointer and counter registers, zmm0-28 (some loops use fewer).
#define MOE_PROBE_CLOBBERS                                                                                    \
  "rax", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "cc", "memory", "xmm0", "xmm1",  \
      "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",    \
      "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",     \
      "xmm25", "xmm26", "xmm27", "xmm28"

// PREFETCH: each k-step's software prefetch of its 3 lines some distance ahead ("" for none).
#define MOE_PF(hint, distance) ".irp l, 0, 1, 2\n\t" hint " " #distance "+64*\\l(%%rax)\n\t.endr\n\t"
#define MOE_DOT_8X48(PREFETCH)                                                                                \
  asm volatile(                                                                                             \
      ".macro moe_token8 ptr, a0, a1, a2\n\t"                                                               \
      "vpbroadcastd (\\ptr,%%rdx,4), %%zmm28\n\t"                                                           \
      "vdpbf16ps %%zmm24, %%zmm28, %%zmm\\a0\n\t"                                                           \
      "vdpbf16ps %%zmm25, %%zmm28, %%zmm\\a1\n\t"                                                           \
      "vdpbf16ps %%zmm26, %%zmm28, %%zmm\\a2\n\t"                                                           \
      ".endm\n\t"                                                                                           \
      ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23\n\t"                         \
      "vpxord %%zmm\\i, %%zmm\\i, %%zmm\\i\n\t.endr\n\t"                                                    \
      "mov 0(%[a]), %%rax\n\tmov 8(%[a]), %%rcx\n\t"                                                        \
      "mov 16(%[a]), %%r8\n\tmov 24(%[a]), %%r9\n\tmov 32(%[a]), %%r10\n\tmov 40(%[a]), %%r11\n\t"          \
      "mov 48(%[a]), %%r12\n\tmov 56(%[a]), %%r13\n\tmov 64(%[a]), %%r14\n\tmov 72(%[a]), %%r15\n\t"        \
      "xor %%edx, %%edx\n\ttest %%rcx, %%rcx\n\tjz 2f\n\t"                                                  \
      "1:\n\t" PREFETCH                                                                                     \
      "vmovdqu64 0(%%rax), %%zmm24\n\tvmovdqu64 64(%%rax), %%zmm25\n\tvmovdqu64 128(%%rax), %%zmm26\n\t"   \
      "moe_token8 %%r8, 0, 1, 2\n\tmoe_token8 %%r9, 3, 4, 5\n\tmoe_token8 %%r10, 6, 7, 8\n\t"               \
      "moe_token8 %%r11, 9, 10, 11\n\tmoe_token8 %%r12, 12, 13, 14\n\tmoe_token8 %%r13, 15, 16, 17\n\t"     \
      "moe_token8 %%r14, 18, 19, 20\n\tmoe_token8 %%r15, 21, 22, 23\n\t"                                    \
      "add $192, %%rax\n\tinc %%rdx\n\tcmp %%rcx, %%rdx\n\tjne 1b\n\t"                                      \
      "2:\n\t"                                                                                              \
      ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23\n\t"                         \
      "vmovdqu64 %%zmm\\i, 64*\\i(%[o])\n\t.endr\n\t"                                                       \
      ".purgem moe_token8"                                                                                  \
      :                                                                                                     \
      : [a] "r"(&a), [o] "r"(out)                                                                           \
      : MOE_PROBE_CLOBBERS)

template <int kPrefetch>
void dot_8x48(const void* w, int64_t k_pairs, const uint32_t* const* x, float* out) {
  struct Args {
    const void* w;
    int64_t steps;
    const uint32_t* x[8];
  } a{w, k_pairs, {x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]}};
  if constexpr (kPrefetch == 0) MOE_DOT_8X48("");
  if constexpr (kPrefetch == 1) MOE_DOT_8X48(MOE_PF("prefetcht0", 1024));
  if constexpr (kPrefetch == 3) MOE_DOT_8X48(MOE_PF("prefetcht0", 4096));
  if constexpr (kPrefetch == 4) MOE_DOT_8X48(MOE_PF("prefetcht1", 8192));
  if constexpr (kPrefetch == 5) MOE_DOT_8X48(MOE_PF("prefetcht1", 4096));
  if constexpr (kPrefetch == 6) MOE_DOT_8X48(MOE_PF("prefetcht1", 16384));
  if constexpr (kPrefetch == 7) MOE_DOT_8X48(MOE_PF("prefetcht2", 8192));
}

// N tokens x 64 rows (the library's layout) over k-steps [begin, end) from w, the accumulators (token-major,
// [N][4][16] floats at acc) loaded before and stored after, so that a block can be walked in chunks; PREFETCH
// runs once a k-step.
#define MOE_DOT_64(PREFETCH, TOKENS, ACCUMULATORS)                                             \
  asm volatile(                                                                                                  \
      ".macro moe_tok ptr, a0, a1, a2, a3\n\t"                                                                   \
      "vpbroadcastd (\\ptr,%%rdx,4), %%zmm28\n\t"                                                                \
      "vdpbf16ps %%zmm24, %%zmm28, %%zmm\\a0\n\tvdpbf16ps %%zmm25, %%zmm28, %%zmm\\a1\n\t"                      \
      "vdpbf16ps %%zmm26, %%zmm28, %%zmm\\a2\n\tvdpbf16ps %%zmm27, %%zmm28, %%zmm\\a3\n\t"                      \
      ".endm\n\t"                                                                                                \
      ".irp i, " ACCUMULATORS "\n\tvmovups 64*\\i(%[o]), %%zmm\\i\n\t.endr\n\t"                                  \
      "mov 0(%[a]), %%rax\n\tmov 8(%[a]), %%rcx\n\tmov 16(%[a]), %%rdx\n\t"                                      \
      "mov 24(%[a]), %%r8\n\tmov 32(%[a]), %%r9\n\tmov 40(%[a]), %%r10\n\tmov 48(%[a]), %%r11\n\t"                \
      "mov 56(%[a]), %%r12\n\tmov 64(%[a]), %%r13\n\t"                                                           \
      "cmp %%rcx, %%rdx\n\tjge 2f\n\t"                                                                           \
      "1:\n\t"                                                                                                   \
      PREFETCH                                                                                                   \
      "vmovdqu64 0(%%rax), %%zmm24\n\tvmovdqu64 64(%%rax), %%zmm25\n\t"                                          \
      "vmovdqu64 128(%%rax), %%zmm26\n\tvmovdqu64 192(%%rax), %%zmm27\n\t" TOKENS                                \
      "add $256, %%rax\n\tinc %%rdx\n\tcmp %%rcx, %%rdx\n\tjne 1b\n\t"                                           \
      "2:\n\t"                                                                                                   \
      ".irp i, " ACCUMULATORS "\n\tvmovups %%zmm\\i, 64*\\i(%[o])\n\t.endr\n\t"                                  \
      ".purgem moe_tok"                                                                                          \
      :                                                                                                          \
      : [a] "r"(&a), [o] "r"(acc)                                                                                \
      : MOE_PROBE_CLOBBERS)

// 8 tokens over a 64-row block as 6 + 2, walked in chunks of `chunk` k-steps: the 6-token pass streams a chunk,
// then the 2-token pass reruns it from L1/L2. The prefetches into L2, 8 KiB ahead, are split in proportion to
// the passes' time a k-step (24 and 8 dot products): lines 0-2 of each k-step by the 6-token pass, line 3 by the
// 2-token pass, so that requests reach DRAM at a steady rate through both.
void dot_6p2_chunked(const char* w, int64_t k_pairs, const uint32_t* const* x, float* acc6, float* acc2,
                     int64_t chunk) {
  std::memset(acc6, 0, 24 * 64);
  std::memset(acc2, 0, 8 * 64);
  for (int64_t c0 = 0; c0 < k_pairs; c0 += chunk) {
    const int64_t c1 = std::min(k_pairs, c0 + chunk);
    {
      struct {
        const char* w;
        int64_t end, begin;
        const uint32_t* x[6];
      } a{w + c0 * 256, c1, c0, {x[0], x[1], x[2], x[3], x[4], x[5]}};
      float* acc = acc6;
      MOE_DOT_64(".irp l, 0, 1, 2\n\tprefetcht1 8192+64*\\l(%%rax)\n\t.endr\n\t",
                 "moe_tok %%r8, 0, 1, 2, 3\n\tmoe_tok %%r9, 4, 5, 6, 7\n\tmoe_tok %%r10, 8, 9, 10, 11\n\t"
                 "moe_tok %%r11, 12, 13, 14, 15\n\tmoe_tok %%r12, 16, 17, 18, 19\n\tmoe_tok %%r13, 20, 21, 22, 23\n\t",
                 "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23");
    }
    {
      struct {
        const char* w;
        int64_t end, begin;
        const uint32_t* x[6];
      } a{w + c0 * 256, c1, c0, {x[6], x[7], nullptr, nullptr, nullptr, nullptr}};
      float* acc = acc2;
      MOE_DOT_64("prefetcht1 8192+192(%%rax)\n\t", "moe_tok %%r8, 0, 1, 2, 3\n\tmoe_tok %%r9, 4, 5, 6, 7\n\t",
                 "0,1,2,3,4,5,6,7");
    }
  }
}

uint64_t read_all(const char* p, size_t bytes) {
  uint64_t acc = 0;
  asm volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "1:\n\t"
      ".irp l, 0,1,2,3,4,5,6,7\n\tvpxord 64*\\l(%[p]), %%zmm0, %%zmm0\n\t.endr\n\t"
      "add $512, %[p]\n\tsub $512, %[n]\n\tjnz 1b\n\t"
      "vmovq %%xmm0, %[acc]\n\t"
      : [p] "+r"(p), [n] "+r"(bytes), [acc] "=r"(acc)
      :
      : "cc", "memory", "xmm0");
  return acc;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  char* w = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, kBytes));
  madvise(w, kBytes, MADV_HUGEPAGE);
  for (size_t i = 0; i < kBytes; i += 4096) w[i] = static_cast<char>(i >> 12);
  std::vector<std::vector<uint32_t>> x(kTokens, std::vector<uint32_t>(kPairs));
  for (int t = 0; t < kTokens; ++t)
    for (int64_t p = 0; p < kPairs; ++p) x[t][p] = 0x3f803f80u + static_cast<uint32_t>((t + p) % 7);
  const uint32_t* xp[kTokens];
  for (int t = 0; t < kTokens; ++t) xp[t] = x[t].data();
  const moe::cpu::KernelTable& lib = moe::cpu::avx512_kernels(moe::cpu::StreamPrefetch::hardware);
  const moe::cpu::KernelTable& lib_sw = moe::cpu::avx512_kernels(moe::cpu::StreamPrefetch::software);
  constexpr int kThreads = 2;

  // The variants: the library's 6 + 2 (hardware or software prefetch), 8 x 48 with a prefetch (0-7 as in
  // dot_8x48), the read probe; warm ones rerun the thread's first block.
  enum class Kind { lib, lib_sw, asm8x48, read, chunked, lib_wide };
  struct Variant {
    const char* name;
    Kind kind;
    int prefetch;
    bool warm;
  };
  const Variant variants[] = {
      {"lib 6+2", Kind::lib, 0, false},       {"lib 6+2 sw", Kind::lib_sw, 0, false},
      {"lib wide 8", Kind::lib_wide, 0, false}, {"lib wide 8 warm", Kind::lib_wide, 0, true},
      {"8x48", Kind::asm8x48, 0, false},      {"t0 1K", Kind::asm8x48, 1, false},
      {"t0 4K", Kind::asm8x48, 3, false},     {"t1 4K", Kind::asm8x48, 5, false},
      {"t1 8K", Kind::asm8x48, 4, false},     {"t1 16K", Kind::asm8x48, 6, false},
      {"t2 8K", Kind::asm8x48, 7, false},     {"read", Kind::read, 0, false},
      {"lib 6+2 warm", Kind::lib, 0, true},   {"8x48 warm", Kind::asm8x48, 0, true},
      {"6+2 chunks 32", Kind::chunked, 32, false},  {"6+2 chunks 128", Kind::chunked, 128, false},
      {"6+2 chunks 512", Kind::chunked, 512, false}, {"6+2 chunks 32 warm", Kind::chunked, 32, true},
  };
  constexpr int kVariants = sizeof(variants) / sizeof(variants[0]);
  // Each thread takes a contiguous half of the blocks.
  const auto run = [&](const Variant& v) {
    const auto work = [&](int thread) {
      alignas(64) float out[kTokens * 64];
      alignas(64) uint16_t act[kTokens][32];
      uint64_t sink = 0;
      if (v.kind == Kind::lib || v.kind == Kind::lib_sw || v.kind == Kind::lib_wide) {
        // The library's panels over each 64-row block: 6 then 2 tokens, or all 8 in one wide panel.
        const moe::cpu::KernelTable& k = v.kind == Kind::lib_sw ? lib_sw : lib;
        const std::vector<int> panels = v.kind == Kind::lib_wide ? std::vector<int>{8} : std::vector<int>{6, 2};
        const int64_t block = 64 * kK * 2, n = kBytes / block;
        for (int64_t b = n * thread / kThreads; b < n * (thread + 1) / kThreads; ++b) {
          const int64_t at = v.warm ? n * thread / kThreads : b;
          moe::cpu::GateUpBf16Args a{.w = reinterpret_cast<const uint16_t*>(w + at * block), .k_pairs = kPairs,
                                     .x = {}, .act = {}, .n = 0};
          int first = 0;
          for (const int panel : panels) {
            a.n = panel;
            for (int t = 0; t < panel; ++t) a.x[t] = xp[first + t], a.act[t] = act[first + t];
            k.gate_up_bf16(a);
            first += panel;
          }
        }
      } else if (v.kind == Kind::chunked) {
        alignas(64) float acc6[24 * 16], acc2[8 * 16];
        const int64_t block = 64 * kK * 2, n = kBytes / block;
        for (int64_t b = n * thread / kThreads; b < n * (thread + 1) / kThreads; ++b)
          dot_6p2_chunked(w + (v.warm ? n * thread / kThreads : b) * block, kPairs, xp, acc6, acc2, v.prefetch);
        if (acc6[0] == 1e30f || acc2[0] == 1e30f) std::printf(" ");
      } else if (v.kind == Kind::asm8x48) {
        const int64_t block = 48 * kK * 2, n = kBytes / block;
        for (int64_t b = n * thread / kThreads; b < n * (thread + 1) / kThreads; ++b) {
          const char* at = w + (v.warm ? n * thread / kThreads : b) * block;
          switch (v.prefetch) {
            case 0: dot_8x48<0>(at, kPairs, xp, out); break;
            case 1: dot_8x48<1>(at, kPairs, xp, out); break;
            case 3: dot_8x48<3>(at, kPairs, xp, out); break;
            case 4: dot_8x48<4>(at, kPairs, xp, out); break;
            case 5: dot_8x48<5>(at, kPairs, xp, out); break;
            case 6: dot_8x48<6>(at, kPairs, xp, out); break;
            default: dot_8x48<7>(at, kPairs, xp, out); break;
          }
        }
      } else {
        const size_t half = kBytes / kThreads;
        sink = read_all(w + half * thread, half);
      }
      if (sink == 42 || out[0] == 1e30f || act[0][0] == 1) std::printf(" ");
    };
    const auto t0 = std::chrono::steady_clock::now();
    std::thread other(work, 1);
    work(0);
    other.join();
    return seconds_since(t0);
  };
  std::vector<double> gbs[kVariants];
  for (int round = 0; round < 12; ++round) {
    std::printf("round %2d:", round);
    for (int v = 0; v < kVariants; ++v) {
      // NOTE: the 64-row pass streams 1 GiB less its remainder, the 48-row pass its own; both ~1 GiB.
      const double s = run(variants[v]), rate = kBytes / s / 1e9;
      gbs[v].push_back(rate);
      std::printf(" %s %.1f |", variants[v].name, rate);
    }
    std::printf("\n");
  }
  std::printf("medians:");
  for (int v = 0; v < kVariants; ++v) {
    std::sort(gbs[v].begin(), gbs[v].end());
    std::printf(" %s %.1f |", variants[v].name, gbs[v][gbs[v].size() / 2]);
  }
  std::printf("  (GB/s of weights; x 8 = GFLOP/s)\n");
  return 0;
}
