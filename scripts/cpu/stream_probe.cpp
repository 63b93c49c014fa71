// A probe, not part of the build: what holds a 2-thread weight stream below the read probe on the Zen 4 VM
// (bench/RESULTS.md, 18th session, CPU)? Streams 1 GiB (a half per thread) five ways, alternated within one
// process for 12 rounds, since the VM's memory switches between a slow (~30 GB/s) and a fast (55-61 GB/s)
// state: scalar loads, 512-bit loads, 512-bit loads into vdpbf16ps (the one-token kernels' k-loop), and the
// first and last with an L2 prefetch 16 KiB ahead (as the library's read probe does), all on transparent huge
// pages as the library's tensors are (allocate_host); and scalar loads on 4 KiB pages, which the VM's THP
// setting (madvise) gives memory not advised. Prints GB/s.
// Build and run: g++ -O2 -std=c++20 scripts/cpu/stream_probe.cpp -lpthread -o /tmp/stream_probe && /tmp/stream_probe
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

// NOTE: after the standard headers, so that no library code is built for this target. GCC 12's AVX-512
// intrinsics start from _mm512_undefined_*, which -Wuninitialized misreports.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx512bw,avx512bf16")

namespace {

constexpr int64_t kAheadWords = 16384 / 8;

// 8 independent xor chains over 64-bit words: every line read, as the library's read probe reads.
template <bool kPrefetch>
__attribute__((noinline)) uint64_t scalar_xor(const uint64_t* p, int64_t n) {
  uint64_t acc[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(p + i + kAheadWords), _MM_HINT_T1);
    for (int l = 0; l < 8; ++l) acc[l] ^= p[i + l];
  }
  uint64_t s = 0;
  for (uint64_t a : acc) s ^= a;
  return s;
}

// 4 x 64 bytes a step into 4 xor chains.
__attribute__((noinline)) uint64_t vector_xor(const uint64_t* p, int64_t n) {
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  for (int64_t i = 0; i + 32 <= n; i += 32)
    for (int r = 0; r < 4; ++r) acc[r] = _mm512_xor_si512(acc[r], _mm512_loadu_si512(p + i + 8 * r));
  return _mm512_reduce_or_epi64(_mm512_xor_si512(_mm512_xor_si512(acc[0], acc[1]), _mm512_xor_si512(acc[2], acc[3])));
}

// 4 x 64 bytes a step into 4 vdpbf16ps chains, as a one-token panel's k-loop.
template <bool kPrefetch>
__attribute__((noinline)) float vector_dot(const uint64_t* p, int64_t n) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    if constexpr (kPrefetch)
      for (int r = 0; r < 4; ++r) _mm_prefetch(reinterpret_cast<const char*>(p + i + kAheadWords + 8 * r), _MM_HINT_T1);
    for (int r = 0; r < 4; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_loadu_si512(p + i + 8 * r), x);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

}  // namespace

int main() {
  const int64_t words = (int64_t{1} << 30) / 8;
  constexpr size_t kHugePage = size_t{2} << 20;
  auto* huge = static_cast<uint64_t*>(std::aligned_alloc(kHugePage, words * 8));
  madvise(huge, words * 8, MADV_HUGEPAGE);
  std::vector<uint64_t> small(words);  // not advised: 4 KiB pages
  std::memset(huge, 1, words * 8);
  std::memset(small.data(), 1, words * 8);
  const char* names[] = {"scalar xor", "vector xor", "vdpbf16ps", "scalar xor + L2 16K", "vdpbf16ps + L2 16K",
                         "scalar xor, 4K pages"};
  constexpr int kVariants = 6, kRounds = 12;
  std::vector<std::vector<double>> rates(kVariants);
  volatile double sink = 0;
  for (int round = 0; round < kRounds; ++round)
    for (int v = 0; v < kVariants; ++v) {
      const auto start = std::chrono::steady_clock::now();
      auto run = [&](int thread) {
        const uint64_t* p = (v == 5 ? small.data() : huge) + thread * words / 2;
        const int64_t n = words / 2;
        const double s = v == 0   ? scalar_xor<false>(p, n)
                         : v == 1 ? vector_xor(p, n)
                         : v == 2 ? vector_dot<false>(p, n)
                         : v == 3 ? scalar_xor<true>(p, n)
                         : v == 4 ? vector_dot<true>(p, n)
                                  : scalar_xor<false>(p, n);
        sink = sink + s;
      };
      std::thread second(run, 1);
      run(0);
      second.join();
      rates[v].push_back(words * 8 / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 1e9);
    }
  for (int v = 0; v < kVariants; ++v) {
    std::printf("%-20s:", names[v]);
    for (double g : rates[v]) std::printf(" %5.1f", g);
    std::vector<double> sorted = rates[v];
    std::sort(sorted.begin(), sorted.end());
    std::printf("   median %5.1f GB/s\n", sorted[kRounds / 2]);
  }
  std::free(huge);
}
