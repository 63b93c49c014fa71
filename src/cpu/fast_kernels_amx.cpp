// AMX micro-kernels of the fast CPU experts: one block of 64 weight rows × a panel of up to 16 tokens with
// tdpbf16ps (bf16) or tdpbusd (int8: u8 activations × s8 weights), on the same packed layout as the AVX-512
// kernels (fast_kernels.h). The block's [k pair][64 rows][2] (int8: [k quad][64 rows][4]) layout is what AMX
// takes as its B operand: 16 k pairs (quads) × 16 rows of a tile are 16 rows of 64 bytes, 256 bytes apart.
// The panel's x rows (equally spaced) are the A operand, 64 bytes a row a step.
// Tiles: 0-3 the block's four 16-row tiles of results (token × row, fp32 or int32), 4 the panel's x, 5-7
// weights.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "fast_kernels.h"

// NOTE: everything below is compiled for AMX and AVX-512; only amx_kernels calls it, after amx_usable().
#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16,amx-int8")

#include "avx512_epilogue.h"

namespace moe::cpu {

namespace {

constexpr int kPairsPerStep = 16;  // k pairs (int8: quads) a tile holds: 64 bytes of x a row
constexpr int64_t kStepBytes = int64_t{kPairsPerStep} * kBlockRows * 4;  // the block stream a step: 4 KiB
// Software prefetch (StreamPrefetch::software) of the step this far ahead.
constexpr int64_t kAmxPrefetchBytes = 2 * kStepBytes;

// The tile configuration (palette 1) for panels of n tokens.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Loads the tile configuration for n tokens unless this thread has it already (a thread's tile
// configuration stays until it loads another: only these kernels use AMX).
void configure_tiles(int n) {
  thread_local int configured = 0;
  if (configured == n) return;
  TileConfig c;
  for (int t = 0; t < 5; ++t) {  // the results and x: a row per token
    c.rows[t] = static_cast<uint8_t>(n);
    c.bytes_per_row[t] = 64;
  }
  for (int t = 5; t < 8; ++t) {  // weights: a row per k pair
    c.rows[t] = kPairsPerStep;
    c.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&c);
  configured = n;
}

// The prefetch of weight tile R (its 16 lines, 256 bytes apart) of the step kAmxPrefetchBytes ahead.
template <bool kSoftwarePrefetch, int R>
[[gnu::always_inline]] inline void prefetch_tile(const char* stream) {
  if constexpr (kSoftwarePrefetch) {
#pragma GCC unroll 16
    for (int l = 0; l < kPairsPerStep; ++l)
      _mm_prefetch(stream + kAmxPrefetchBytes + kBlockRows * 4 * l + 64 * R, _MM_HINT_T0);
  }
}

// Tile c += tile 4 (x) · tile b, with the product of dot_tiles' kInt8.
// NOTE: a macro, as the tile intrinsics take their tile numbers as literals (they are pasted into the asm).
#define MOE_TILE_DOT(c, b)   \
  if constexpr (kInt8) {     \
    _tile_dpbusd(c, 4, b);   \
  } else {                   \
    _tile_dpbf16ps(c, 4, b); \
  }

// c[r][i][j] = Σ_p block[p][16r + j] · x_i[p] over k pairs (int8: quads; c then holds int32), for the n
// tokens x_i = x0 + i · x_stride bytes.
template <bool kInt8, bool kSoftwarePrefetch>
[[gnu::always_inline]] inline void dot_tiles(const void* w, int64_t k_pairs, const void* x0, int64_t x_stride,
                                             int n, float (&c)[kTiles][kMaxTilePanel][16]) {
  configure_tiles(n);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const char* stream = static_cast<const char*>(w);
  const char* x = static_cast<const char*>(x0);
  // With software prefetch, each weight tile's load is preceded by the prefetch of the same tile of the step
  // kAmxPrefetchBytes ahead (its 16 lines, 256 bytes apart), so that the requests go out spread over the step
  // and in the order the loads will want them.
  // NOTE: measured on one core of an AMX Xeon VM (2026-12-01): a 1 GiB stream of blocks
  // ran 14.4-14.7 GB/s with the step's 64 lines prefetched at once, 16.6 with no prefetch and 18.5-19.0
  // spread as here (a read probe: 17.7-18.4); in the layer, Mixtral T=1 went from 1.27 to 1.00-1.03x its
  // floor.
  for (int64_t p = 0; p < k_pairs; p += kPairsPerStep, stream += kStepBytes, x += 64) {
    _tile_loadd(4, x, x_stride);
    prefetch_tile<kSoftwarePrefetch, 0>(stream);
    _tile_loadd(5, stream, kBlockRows * 4);
    MOE_TILE_DOT(0, 5);
    prefetch_tile<kSoftwarePrefetch, 1>(stream);
    _tile_loadd(6, stream + 64, kBlockRows * 4);
    MOE_TILE_DOT(1, 6);
    prefetch_tile<kSoftwarePrefetch, 2>(stream);
    _tile_loadd(7, stream + 128, kBlockRows * 4);
    MOE_TILE_DOT(2, 7);
    prefetch_tile<kSoftwarePrefetch, 3>(stream);
    _tile_loadd(5, stream + 192, kBlockRows * 4);
    MOE_TILE_DOT(3, 5);
  }
#undef MOE_TILE_DOT
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
}

template <bool P>
void gate_up_amx(const GateUpBf16Args& a) {
  alignas(64) float c[kTiles][kMaxTilePanel][16];
  dot_tiles<false, P>(a.w, a.k_pairs, a.x[0], a.x_stride, a.n, c);
  for (int i = 0; i < a.n; ++i) {
    const __m512 h0 = silu_mul_ps(_mm512_load_ps(c[0][i]), _mm512_load_ps(c[2][i]));
    const __m512 h1 = silu_mul_ps(_mm512_load_ps(c[1][i]), _mm512_load_ps(c[3][i]));
    _mm512_storeu_si512(a.act[i], (__m512i)_mm512_cvtne2ps_pbh(h1, h0));  // RNE; h0 in the low half
  }
}

template <bool P>
void down_amx(const DownBf16Args& a) {
  alignas(64) float c[kTiles][kMaxTilePanel][16];
  dot_tiles<false, P>(a.w, a.k_pairs, a.x[0], a.x_stride, a.n, c);
  for (int i = 0; i < a.n; ++i) {
    const __m512 v[kTiles] = {_mm512_load_ps(c[0][i]), _mm512_load_ps(c[1][i]), _mm512_load_ps(c[2][i]),
                              _mm512_load_ps(c[3][i])};
    add_scaled_rows(a.out[i], v, a.weight[i], a.valid_rows);
  }
}

// Token i's four tiles of int32 sums, dequantised.
inline void dequant_token(const float (&c)[kTiles][kMaxTilePanel][16], int i, const float* w_scale,
                          const int32_t* w_comp, float x_scale, __m512 (&v)[kTiles]) {
#pragma GCC unroll 4
  for (int r = 0; r < kTiles; ++r) v[r] = dequant(_mm512_load_si512(c[r][i]), w_scale, w_comp, r, x_scale);
}

template <bool P>
void gate_up_int8_amx(const GateUpInt8Args& a) {
  alignas(64) float c[kTiles][kMaxTilePanel][16];
  dot_tiles<true, P>(a.w, a.k_quads, a.x[0], a.x_stride, a.n, c);
  for (int i = 0; i < a.n; ++i) {
    __m512 v[kTiles];
    dequant_token(c, i, a.w_scale, a.w_comp, a.x_scale[i], v);
    _mm512_storeu_ps(a.act[i], silu_mul_ps(v[0], v[2]));
    _mm512_storeu_ps(a.act[i] + 16, silu_mul_ps(v[1], v[3]));
  }
}

template <bool P>
void down_int8_amx(const DownInt8Args& a) {
  alignas(64) float c[kTiles][kMaxTilePanel][16];
  dot_tiles<true, P>(a.w, a.k_quads, a.x[0], a.x_stride, a.n, c);
  for (int i = 0; i < a.n; ++i) {
    __m512 v[kTiles];
    dequant_token(c, i, a.w_scale, a.w_comp, a.x_scale[i], v);
    add_scaled_rows(a.out[i], v, a.weight[i], a.valid_rows);
  }
}

template <bool kSoftwarePrefetch>
const KernelTable& kernels() {
  static const KernelTable table{
      .panel = kMaxTilePanel,
      .wide_panel = 0,
      .tile_panel = kMaxTilePanel,
      .gate_up_bf16 = &gate_up_amx<kSoftwarePrefetch>,
      .down_bf16 = &down_amx<kSoftwarePrefetch>,
      .gate_up_int8 = &gate_up_int8_amx<kSoftwarePrefetch>,
      .down_int8 = &down_int8_amx<kSoftwarePrefetch>,
  };
  return table;
}

}  // namespace

const KernelTable& amx_kernels(StreamPrefetch prefetch) {
  return prefetch == StreamPrefetch::software ? kernels<true>() : kernels<false>();
}

}  // namespace moe::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace moe::cpu {

bool amx_usable() {
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx_bf16 = (d >> 22) & 1u, amx_tile = (d >> 24) & 1u, amx_int8 = (d >> 25) & 1u;
    const bool avx512_bf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (!amx_bf16 || !amx_tile || !amx_int8 || !avx512_bf16) return false;
    // The OS must save the tile state (XCR0 bits 17, 18) and grant it to this process (Linux 5.16+).
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return false;  // OSXSAVE
    uint32_t xcr0_low = 0, xcr0_high = 0;
    asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

}  // namespace moe::cpu
