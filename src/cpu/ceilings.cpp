// Ceilings for the benchmark's floor: read bandwidth and the dot instructions' peak rate.
#include "cpu/ceilings.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "moe/core/check.h"
#include "moe/core/tensor.h"
#include "core/thread_pool.h"

namespace moe::cpu {

namespace {

using Clock = std::chrono::steady_clock;

// Sums 64-bit words of [p, p + n): every cache line is touched; four chains keep loads in flight.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) uint64_t read_sum(const uint64_t* p, int64_t n) {
  uint64_t acc[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] ^= p[i + l];
  uint64_t s = 0;
  for (uint64_t a : acc) s ^= a;
  return s;
}

// The same, fetching each line 16 KiB ahead into L2 as well, as the expert kernels fetch their weights: a
// core then keeps more reads in flight than its prefetchers alone do, and this VM reads up to 10-15% faster
// (2 threads, 1 GiB, best of three runs: 26.8 against 23.5 GB/s; Xeon VM, 2026-11-30). The
// floor takes the faster.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) uint64_t read_sum_prefetched(const uint64_t* p,
                                                                                                 int64_t n) {
  constexpr int64_t kAheadWords = 16384 / 8;
  uint64_t acc[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kAheadWords), _MM_HINT_T1);
    for (int l = 0; l < 8; ++l) acc[l] ^= p[i + l];
  }
  uint64_t s = 0;
  for (uint64_t a : acc) s ^= a;
  return s;
}

constexpr int64_t kPeakIterations = 1 << 22;
constexpr int kChains = 24;

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni")
// kPeakIterations rounds of kChains independent dot instructions (vpdpbusd, or vdpbf16ps), 24 accumulator
// registers and two constant sources. NOTE: an asm loop: written with intrinsics (both kinds in one
// function), GCC kept 6 accumulators in registers and the rest on the stack, and the int8 probe reported
// about half the true rate (711 against 1,448 GOP/s), below what the expert kernels reached (952 GOP/s;
// Xeon VM, 2026-11-30).
float peak_loop_avx512(bool int8) {
  static_assert(kChains == 24, "the asm below runs 24 chains");
  int lane0 = 0;  // the first accumulator's first lane: what the caller keeps so the work is not dropped
  const __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x3c003c00);
#define MOE_PEAK_LOOP(INSTRUCTION)                                                                        \
  asm volatile(                                                                                          \
      ".irp i, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23\n\t" \
      "vpxord %%zmm\\i, %%zmm\\i, %%zmm\\i\n\t.endr\n\t"                                                 \
      "vmovdqu64 %[a], %%zmm24\n\tvmovdqu64 %[b], %%zmm25\n\tmov %[n], %%rcx\n\t"                        \
      "1:\n\t"                                                                                           \
      ".irp i, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23\n\t" \
      INSTRUCTION " %%zmm25, %%zmm24, %%zmm\\i\n\t.endr\n\t"                                             \
      "dec %%rcx\n\tjnz 1b\n\t"                                                                          \
      "vmovd %%xmm0, %[r]"                                                                               \
      : [r] "=r"(lane0)                                                                                  \
      : [a] "m"(a), [b] "m"(b), [n] "r"(kPeakIterations)                                                 \
      : "rcx", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",        \
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",   \
        "xmm21", "xmm22", "xmm23", "xmm24", "xmm25")
  if (int8) {
    MOE_PEAK_LOOP("vpdpbusd");
  } else {
    MOE_PEAK_LOOP("vdpbf16ps");
  }
#undef MOE_PEAK_LOOP
  return static_cast<float>(lane0);
}
#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
float peak_loop_avx2() {
  __m256 acc[12];
  for (auto& v : acc) v = _mm256_setzero_ps();
  const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-9f);
  for (int64_t i = 0; i < kPeakIterations; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < 12; ++c) acc[c] = _mm256_fmadd_ps(a, b, acc[c]);
  float out[8], s = 0;
  for (auto& v : acc) {
    _mm256_storeu_ps(out, v);
    for (float f : out) s += f;
  }
  return s;
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f")
float fma_loop_avx512() {
  __m512 acc[16];
  for (auto& v : acc) v = _mm512_setzero_ps();
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-9f);
  for (int64_t i = 0; i < kPeakIterations; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) acc[c] = _mm512_fmadd_ps(a, b, acc[c]);
  float s = 0;
  for (auto& v : acc) s += _mm512_reduce_add_ps(v);
  return s;
}
#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

ReadProbe::ReadProbe(int64_t bytes) : buffer_(Tensor::empty(DType::I64, {bytes / 8})) {
  ThreadPool& pool = ThreadPool::global();
  const int n_threads = pool.size();
  const int64_t words = buffer_.numel();
  uint64_t* data = static_cast<uint64_t*>(buffer_.data());
  pool.parallel_for(n_threads, 1, [&](int64_t t0, int64_t t1) {  // fault the pages in on their readers
    for (int64_t t = t0; t < t1; ++t) std::memset(data + words / n_threads * t, 1, words / n_threads * 8);
  });
}

double ReadProbe::measure(int passes) {
  ThreadPool& pool = ThreadPool::global();
  const int n_threads = pool.size();
  const int64_t words = buffer_.numel();
  const uint64_t* data = static_cast<const uint64_t*>(buffer_.data());
  double best = 0;
  std::vector<uint64_t> sink(n_threads);
  for (int pass = 0; pass < passes; ++pass)
    for (auto* read : {&read_sum, &read_sum_prefetched}) {
      const auto start = Clock::now();
      pool.parallel_for(n_threads, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) sink[t] = read(data + words / n_threads * t, words / n_threads);
      });
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      best = std::max(best, double(words / n_threads * n_threads * 8) / seconds);
    }
  return best;
}

double measure_read_bandwidth(int64_t bytes, int passes) { return ReadProbe(bytes).measure(passes); }

double measure_peak_flops(Isa isa, quant::WeightFormat format, int passes) {
  ThreadPool& pool = ThreadPool::global();
  const int n_threads = pool.size();
  const bool int8 = format == quant::WeightFormat::int8;
  // NOTE: with AMX the floor keeps the vdpbf16ps / vpdpbusd peak (the CPU floor's definition); the
  // tiles' own peak is many times higher, so compute-bound points can run below that floor.
  const bool avx512 = isa == Isa::avx512 || isa == Isa::amx;
  const double per_thread =
      avx512 ? double(kPeakIterations) * kChains * (int8 ? 128 : 64) : double(kPeakIterations) * 12 * 16;
  double best = 0;
  std::vector<float> sink(n_threads);
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = Clock::now();
    pool.parallel_for(n_threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) sink[t] = avx512 ? peak_loop_avx512(int8) : peak_loop_avx2();
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, per_thread * n_threads / seconds);
  }
  return best;
}

double measure_fp32_fma_peak(int passes) {
  ThreadPool& pool = ThreadPool::global();
  const int n_threads = pool.size();
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  MOE_CHECK(avx512 || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")),
            "the fp32 FMA probe needs AVX2 and FMA");
  const double per_thread = avx512 ? double(kPeakIterations) * 16 * 32 : double(kPeakIterations) * 12 * 16;
  double best = 0;
  std::vector<float> sink(n_threads);
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = Clock::now();
    pool.parallel_for(n_threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) sink[t] = avx512 ? fma_loop_avx512() : peak_loop_avx2();
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, per_thread * n_threads / seconds);
  }
  return best;
}

}  // namespace moe::cpu
