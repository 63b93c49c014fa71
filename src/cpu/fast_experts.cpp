// The fast CPU experts' driver: ISA choice, activation rounding/quantisation, and the two scheduled passes
// (gate+up by work items, down by hidden rows) over the micro-kernels of fast_kernels_*.cpp.
#include "cpu/fast_experts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fast_kernels.h"
#include "core/float_convert.h"
#include "core/knobs.h"
#include "core/thread_pool.h"

namespace moe::cpu {

namespace {

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// k chunk of the down projection: 64 rows × 8192 bf16 = 1 MiB, which stays in L2 while a prefill's token
// panels reuse it (Mixtral's I = 14336 would not).
constexpr int64_t kDownChunkPairs = 4096;

// Splits [0, n) items with the given costs into chunks that `threads` threads claim in order (guided
// self-scheduling): each chunk takes 1/(2·threads) of the cost still left, but at least 1/(32·threads) of
// the total, so the first chunks are long weight streams and the last ones short enough that the threads
// finish together however their speeds differ.
// NOTE: a static split into equal costs, one range a thread, finished one thread 10-40% after the other at
// Qwen3 T=1 on the 2-core VM (its cores pull from DRAM at different rates from run to run).
std::vector<int64_t> guided_bounds(const std::vector<double>& cost, int threads) {
  double total = 0;
  for (double c : cost) total += c;
  const double min_chunk = total / (32.0 * threads);
  std::vector<int64_t> bounds{0};
  double left = total;
  for (size_t i = 0; i < cost.size();) {
    const double target = std::max(left / (2.0 * threads), min_chunk);
    double taken = cost[i++];
    // item i joins the chunk while the chunk stays nearer the target with it than without
    while (i < cost.size() && taken + cost[i] / 2 <= target) taken += cost[i++];
    left -= taken;
    bounds.push_back(static_cast<int64_t>(i));
  }
  return bounds;
}

// Token rows split into panels of at most `panel`: the first as large as allowed, the rest as even as
// possible (8 tokens: 6, 2; 32 tokens: 6, then 6,5,5,5,5). The first panel over a block of weights
// streams it from DRAM and the later ones find it in cache, so the first should carry as many tokens as
// the registers allow: its memory stall is then shared by more math (Mixtral T=32, 8 tokens an expert:
// 6+2 instead of 4+4).
template <class F>
void for_each_panel(int64_t count, int panel, const F& f) {
  if (count <= 0) return;
  const int first = static_cast<int>(std::min<int64_t>(count, panel));
  f(0, first);
  const int64_t rest = count - first;
  const int64_t n_panels = (rest + panel - 1) / panel;
  int64_t begin = first;
  for (int64_t p = 0; p < n_panels; ++p) {
    const int64_t size = rest / n_panels + (p < rest % n_panels ? 1 : 0);
    f(begin, static_cast<int>(size));
    begin += size;
  }
}

// Per-token symmetric int8 of a row of n values, stored as u8 = q + 128 (vpdpbusd multiplies u8 by s8).
float quantize_row_u8(const float* v, int64_t n, int64_t n_pad, uint8_t* q) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(v[i]));
    nan |= v[i] != v[i];
  }
  // NOTE: Inf or NaN (an activation that overflowed float: huge weights) has no int8 value, and converting it
  // is undefined behaviour; the bf16 experts carry it through as the reference does.
  MOE_CHECK(std::isfinite(amax) && !nan,
            "int8 experts: an activation row of {} values holds Inf or NaN (the weights overflow float); use the "
            "bf16 weight format", n);
  // NOTE: 127 / amax overflows for a row of subnormals (0 * inf would be a NaN): such a row quantises to zeros.
  const float inverse = amax > 0.0f && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
  // NOTE: rounding half away from zero by truncation, which the compiler vectorises (std::nearbyint is a
  // library call per element on baseline x86-64, and this runs over every activation).
  for (int64_t i = 0; i < n; ++i) {
    const float r = v[i] * inverse;
    q[i] = static_cast<uint8_t>(static_cast<int32_t>(r + (r >= 0.0f ? 0.5f : -0.5f)) + 128);
  }
  for (int64_t i = n; i < n_pad; ++i) q[i] = 128;
  return amax / 127.0f;
}

}  // namespace

float silu_mul_scalar(float g, float u) { return g * u / (1.0f + std::exp(-g)); }

Isa detect_isa() {
  const bool avx512 = cpu_has_avx512_bf16();
  if (const std::optional<Knobs::CpuIsa> want = Knobs::from_env().cpu_isa) {
    switch (*want) {
      case Knobs::CpuIsa::avx2:
        MOE_CHECK(cpu_has_avx2(), "MOE_CPU_ISA=avx2 but this CPU lacks AVX2/FMA");
        return Isa::avx2;
      case Knobs::CpuIsa::amx:
        MOE_CHECK(avx512 && amx_usable(),
                  "MOE_CPU_ISA=amx but this CPU lacks AMX (BF16, INT8) or AVX-512 BF16/VNNI, or the OS does not "
                  "grant this process the tile state (Linux 5.16+)");
        return Isa::amx;
      case Knobs::CpuIsa::avx512:
        MOE_CHECK(avx512, "MOE_CPU_ISA=avx512 but this CPU lacks AVX-512 BF16/VNNI");
        return Isa::avx512;
    }
  }
  if (avx512 && amx_usable()) return Isa::amx;
  if (avx512) return Isa::avx512;
  MOE_CHECK(cpu_has_avx2(), "the fast CPU experts need AVX2 and FMA; use the reference experts on this CPU");
  return Isa::avx2;
}

StreamPrefetch detect_stream_prefetch() {
  if (const std::optional<Knobs::StreamPrefetch> want = Knobs::from_env().cpu_stream_prefetch)
    return *want == Knobs::StreamPrefetch::software ? StreamPrefetch::software : StreamPrefetch::hardware;
  __builtin_cpu_init();
  return __builtin_cpu_is("amd") ? StreamPrefetch::hardware : StreamPrefetch::software;
}

std::string_view stream_prefetch_name(StreamPrefetch prefetch) {
  return prefetch == StreamPrefetch::software ? "software prefetch" : "hardware prefetch";
}

bool fast_experts_available() { return cpu_has_avx2(); }

std::string_view isa_name(Isa isa) {
  if (isa == Isa::amx) return "amx";
  return isa == Isa::avx512 ? "avx512-bf16" : "avx2-fma";
}

void fused_swiglu_experts(std::span<const ExpertRows> all_segments, const Tensor& x, Tensor& out, Isa isa,
                          StreamPrefetch prefetch) {
  MOE_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous(), "fast experts expect contiguous F32 x [T, H]");
  MOE_CHECK(out.shape() == x.shape() && out.dtype() == DType::F32 && out.is_contiguous(),
            "fast experts' output {} does not match x {}", out.shape_string(), x.shape_string());
  const int64_t T = x.size(0), H = x.size(1);
  std::vector<ExpertRows> segs;  // the segments with rows
  for (const ExpertRows& s : all_segments)
    if (s.count > 0) segs.push_back(s);
  if (segs.empty()) return;
  const quant::WeightFormat format = segs[0].expert->format;
  const int64_t Hp = segs[0].expert->hidden_pad;
  for (const ExpertRows& s : segs) {
    MOE_CHECK(s.expert->hidden == H && s.expert->format == format, "expert of hidden size {} ({}) given x of {} ({})",
              s.expert->hidden, quant::weight_format_name(s.expert->format), H, quant::weight_format_name(format));
    for (int64_t i = 0; i < s.count; ++i)
      MOE_CHECK(s.token[i] >= 0 && s.token[i] < T, "expert row {} names token {} of {}", i, s.token[i], T);
  }
  const KernelTable& kernels = isa == Isa::amx      ? amx_kernels(prefetch)
                               : isa == Isa::avx512 ? avx512_kernels(prefetch)
                                                    : avx2_kernels();
  ThreadPool& pool = ThreadPool::global();
  const int n_threads = pool.size();
  const bool bf16 = format == quant::WeightFormat::bf16;
  // An expert's panel size: AMX tiles take up to tile_panel tokens; otherwise bf16 experts of panel + 1 ..
  // wide_panel tokens run them all in one wide panel, a single pass over each block (KernelTable::wide_panel),
  // the others panels of at most `panel`.
  const auto panel_for = [&](int64_t count) {
    if (kernels.tile_panel > 0) return kernels.tile_panel;
    const bool wide = bf16 && count > kernels.panel && count <= kernels.wide_panel;
    return wide ? static_cast<int>(count) : kernels.panel;
  };
  // Tile panels read their tokens' x rows equally spaced: pass 0 then writes x in segment order instead,
  // row (segment s, i) holding token s.token[i] (T k rows instead of T).
  const bool x_by_segment = kernels.tile_panel > 0;
  std::vector<int64_t> segment_row(segs.size() + 1, 0);
  for (size_t s = 0; s < segs.size(); ++s) segment_row[s + 1] = segment_row[s] + segs[s].count;

  // Pass 0: the tokens' activations, [T, Hp] (or [T k, Hp] in segment order, x_by_segment) bf16, or u8 and a
  // scale per row.
  const int64_t x_rows = x_by_segment ? segment_row.back() : T;
  Tensor xq = Tensor::empty(bf16 ? DType::BF16 : DType::U8, {x_rows, Hp});
  std::vector<float> x_scale(bf16 ? 0 : x_rows);
  const float* xf = x.data_as<float>();
  std::vector<int32_t> row_token;  // x_by_segment: the token of each row
  if (x_by_segment)
    for (const ExpertRows& s : segs) row_token.insert(row_token.end(), s.token, s.token + s.count);
  pool.parallel_for(x_rows, std::max<int64_t>(1, 4096 / H), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = x_by_segment ? row_token[r] : r;
      if (bf16) {
        uint16_t* row = static_cast<uint16_t*>(xq.data()) + r * Hp;
        for (int64_t h = 0; h < H; ++h) row[h] = f32_to_bf16(xf[t * H + h]);
        std::fill(row + H, row + Hp, uint16_t{0});
      } else {
        x_scale[r] = quantize_row_u8(xf + t * H, H, Hp, static_cast<uint8_t*>(xq.data()) + r * Hp);
      }
    }
  });
  // The x row (and its int8 scale) of row i of segment s.
  auto x_index = [&](size_t s, int64_t i) { return x_by_segment ? segment_row[s] + i : segs[s].token[i]; };
  auto x_row = [&](size_t s, int64_t i) {
    return reinterpret_cast<const uint32_t*>(static_cast<const char*>(xq.data()) +
                                             x_index(s, i) * Hp * (bf16 ? 2 : 1));
  };

  // Activations of every (segment, row): bf16 [rows, I_pad], or fp32 then u8 for int8.
  std::vector<int64_t> act_offset(segs.size() + 1, 0);  // in elements
  for (size_t s = 0; s < segs.size(); ++s)
    act_offset[s + 1] = act_offset[s] + segs[s].count * segs[s].expert->intermediate_pad;
  Tensor act = Tensor::empty(bf16 ? DType::BF16 : DType::F32, {act_offset.back()});

  // Pass 1: gate + up + SwiGLU. Work items (segment, block of 32 intermediate values), costed by estimated
  // time: streaming the block's weights (bandwidth) plus its flops (compute).
  struct Item {
    int32_t segment;
    int32_t block;
  };
  std::vector<Item> items;
  std::vector<double> cost;
  for (size_t s = 0; s < segs.size(); ++s) {
    const PackedExpert& e = *segs[s].expert;
    // NOTE: about 12 flops per weight byte balance this machine's bf16 peak against DRAM bandwidth.
    const double block_cost = 12.0 * kBlockRows * Hp * (bf16 ? 2 : 1) + 2.0 * kBlockRows * Hp * segs[s].count;
    for (int64_t b = 0; b < e.gate_up.n_blocks; ++b) {
      items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(b)});
      cost.push_back(block_cost);
    }
  }
  const std::vector<int64_t> chunks = guided_bounds(cost, n_threads);
  pool.parallel_for(static_cast<int64_t>(chunks.size()) - 1, 1, [&](int64_t chunk0, int64_t chunk1) {
    for (int64_t chunk = chunk0; chunk < chunk1; ++chunk)
      for (int64_t it = chunks[chunk]; it < chunks[chunk + 1]; ++it) {
        const ExpertRows& s = segs[items[it].segment];
        const PackedExpert& e = *s.expert;
        const int64_t b = items[it].block;
        for_each_panel(s.count, panel_for(s.count), [&](int64_t begin, int n) {
          if (bf16) {
            GateUpBf16Args a{.w = e.gate_up.bf16_block(b), .k_pairs = Hp / 2, .x = {}, .x_stride = Hp * 2, .act = {},
                             .n = n};
            for (int i = 0; i < n; ++i) {
              a.x[i] = x_row(items[it].segment, begin + i);
              a.act[i] = static_cast<uint16_t*>(act.data()) + act_offset[items[it].segment] +
                         (begin + i) * e.intermediate_pad + b * kGateUpCols;
            }
            kernels.gate_up_bf16(a);
          } else {
            GateUpInt8Args a{.w = e.gate_up.int8_block(b),
                             .k_quads = Hp / 4,
                             .w_scale = e.gate_up.scale.data() + b * kBlockRows,
                             .w_comp = e.gate_up.comp.data() + b * kBlockRows,
                             .x = {},
                             .x_stride = Hp,
                             .x_scale = {},
                             .act = {},
                             .n = n};
            for (int i = 0; i < n; ++i) {
              a.x[i] = x_row(items[it].segment, begin + i);
              a.x_scale[i] = x_scale[x_index(items[it].segment, begin + i)];
              a.act[i] = act.data_as<float>() + act_offset[items[it].segment] + (begin + i) * e.intermediate_pad +
                         b * kGateUpCols;
            }
            kernels.gate_up_int8(a);
          }
        });
      }
  });

  // int8: the activations quantised per row for the down projection.
  Tensor act_q;
  std::vector<float> act_scale;
  std::vector<int64_t> row_segment;  // segment of each act row
  if (!bf16) {
    std::vector<int64_t> row_begin(segs.size() + 1, 0);
    for (size_t s = 0; s < segs.size(); ++s) row_begin[s + 1] = row_begin[s] + segs[s].count;
    act_q = Tensor::empty(DType::U8, {act_offset.back()});
    act_scale.resize(row_begin.back());
    pool.parallel_for(static_cast<int64_t>(segs.size()), 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        const int64_t Ip = segs[s].expert->intermediate_pad, I = segs[s].expert->intermediate;
        for (int64_t i = 0; i < segs[s].count; ++i)
          act_scale[row_begin[s] + i] = quantize_row_u8(act.data_as<float>() + act_offset[s] + i * Ip, I, Ip,
                                                        static_cast<uint8_t*>(act_q.data()) + act_offset[s] + i * Ip);
      }
    });
    row_segment = std::move(row_begin);
  }

  // Pass 2: down, the threads splitting the hidden rows (chunks of row blocks, claimed as in pass 1); each
  // token's experts added in segment order.
  float* y = out.data_as<float>();
  const int64_t n_blocks = Hp / kBlockRows;
  const std::vector<int64_t> row_chunks = guided_bounds(std::vector<double>(n_blocks, 1.0), n_threads);
  pool.parallel_for(static_cast<int64_t>(row_chunks.size()) - 1, 1, [&](int64_t chunk0, int64_t chunk1) {
    const int64_t b0 = row_chunks[chunk0], b1 = row_chunks[chunk1];
    for (size_t si = 0; si < segs.size(); ++si) {
      const ExpertRows& s = segs[si];
      const PackedExpert& e = *s.expert;
      const int64_t Ip = e.intermediate_pad;
      for (int64_t b = b0; b < b1; ++b) {
        const int valid = static_cast<int>(std::min<int64_t>(kBlockRows, H - b * kBlockRows));
        if (bf16) {
          for (int64_t p0 = 0; p0 < Ip / 2; p0 += kDownChunkPairs) {
            const int64_t pairs = std::min(kDownChunkPairs, Ip / 2 - p0);
            for_each_panel(s.count, panel_for(s.count), [&](int64_t begin, int n) {
              DownBf16Args a{.w = e.down.bf16_block(b) + p0 * 2 * kBlockRows, .k_pairs = pairs, .x = {},
                             .x_stride = Ip * 2, .out = {}, .weight = {}, .valid_rows = valid, .n = n};
              for (int i = 0; i < n; ++i) {
                a.x[i] = reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(act.data()) + act_offset[si] +
                                                           (begin + i) * Ip) + p0;
                a.out[i] = y + s.token[begin + i] * H + b * kBlockRows;
                a.weight[i] = s.weight[begin + i];
              }
              kernels.down_bf16(a);
            });
          }
        } else {
          for_each_panel(s.count, kernels.panel, [&](int64_t begin, int n) {
            DownInt8Args a{.w = e.down.int8_block(b),
                           .k_quads = Ip / 4,
                           .w_scale = e.down.scale.data() + b * kBlockRows,
                           .w_comp = e.down.comp.data() + b * kBlockRows,
                           .x = {},
                           .x_stride = Ip,
                           .x_scale = {},
                           .out = {},
                           .weight = {},
                           .valid_rows = valid,
                           .n = n};
            for (int i = 0; i < n; ++i) {
              a.x[i] = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(act_q.data()) + act_offset[si] +
                                                         (begin + i) * Ip);
              a.x_scale[i] = act_scale[row_segment[si] + begin + i];
              a.out[i] = y + s.token[begin + i] * H + b * kBlockRows;
              a.weight[i] = s.weight[begin + i];
            }
            kernels.down_int8(a);
          });
        }
      }
    }
  });
}

}  // namespace moe::cpu
