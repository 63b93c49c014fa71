#pragma once
// Internal to the fast CPU experts: the packed weight layout and the micro-kernels of each ISA.
//
// A packed matrix is a sequence of blocks of kBlockRows = 64 output rows (4 tiles of 16, one 512-bit
// register of fp32 results per tile and token). Inside a block the reduction dimension k runs outermost,
// so that a block is one contiguous stream:
//   bf16: [k_pad / 2][64 rows][2]  (the pair (k, k+1) of one row is one 32-bit lane, as vdpbf16ps wants)
//   int8: [k_pad / 4][64 rows][4]  (the quad of one row is one 32-bit lane, as vpdpbusd wants)
// gate_up: block b holds gate rows [32b, 32b + 32) in tiles 0-1 and up rows [32b, 32b + 32) in tiles 2-3,
// so the SwiGLU of 32 intermediate values is finished in registers. down: block b holds rows [64b, 64b + 64).
// Padding rows and columns are zero.

#include <cstdint>
#include <vector>

#include "moe/core/tensor.h"
#include "cpu/fast_experts.h"

namespace moe::cpu {

inline constexpr int kBlockRows = 64;
inline constexpr int kGateUpCols = 32;  // intermediate values finished per gate_up block

struct PackedMatrix {
  int64_t n_blocks = 0;
  int64_t k_pad = 0;           // reduction length, padded to a multiple of 4 (zeros)
  Tensor data;                 // BF16 [n_blocks * 64 * k_pad] or I8 [n_blocks * 64 * k_pad]
  std::vector<float> scale;    // int8: per row [n_blocks * 64]: dequantisation scale
  std::vector<int32_t> comp;   // int8: per row 128 · Σ_k q (undoes the +128 shift of the u8 activations)
  const uint16_t* bf16_block(int64_t b) const { return static_cast<const uint16_t*>(data.data()) + b * kBlockRows * k_pad; }
  const int8_t* int8_block(int64_t b) const { return static_cast<const int8_t*>(data.data()) + b * kBlockRows * k_pad; }
};

struct PackedExpert {
  quant::WeightFormat format = quant::WeightFormat::bf16;
  int64_t hidden = 0, intermediate = 0;
  int64_t hidden_pad = 0;        // multiple of 64: down's rows, gate/up's k
  int64_t intermediate_pad = 0;  // multiple of 64: gate/up's rows (halves), down's k
  PackedMatrix gate_up;          // intermediate_pad / 32 blocks, k = hidden_pad
  PackedMatrix down;             // hidden_pad / 64 blocks, k = intermediate_pad
};

// One call runs one block of 64 weight rows against n <= kMaxPanel tokens (bf16: n <= kMaxWidePanel, where
// the ISA has wide panels: KernelTable::wide_panel; n <= kMaxTilePanel with AMX tiles: KernelTable::tile_panel).
inline constexpr int kMaxPanel = 6;
inline constexpr int kMaxWidePanel = 12;
inline constexpr int kMaxTilePanel = 16;  // an AMX tile's rows: the widest panel of every format

// bf16 x rows: x[i] for each token; where KernelTable::tile_panel is set, the rows are also equally spaced,
// x[i] = x[0] + i * x_stride bytes (the AMX kernels load the panel as one tile of rows).
struct GateUpBf16Args {
  const uint16_t* w;         // the block
  int64_t k_pairs;
  const uint32_t* x[kMaxTilePanel];  // each token's bf16 pairs [k_pairs]
  int64_t x_stride;                  // bytes
  uint16_t* act[kMaxTilePanel];      // each token's 32 bf16 outputs silu(gate) * up
  int n;
};
struct DownBf16Args {
  const uint16_t* w;  // the block, at pair p0 of a k chunk
  int64_t k_pairs;    // pairs in the chunk
  const uint32_t* x[kMaxTilePanel];  // each token's activation pairs, from p0
  int64_t x_stride;                  // bytes
  float* out[kMaxTilePanel];         // each token's 64 output values (+= weight * result)
  float weight[kMaxTilePanel];
  int valid_rows;  // rows of the block inside the hidden size
  int n;
};
// int8 x rows: as bf16's (x[i], and x_stride where KernelTable::tile_panel is set).
struct GateUpInt8Args {
  const int8_t* w;
  int64_t k_quads;
  const float* w_scale;  // [64]
  const int32_t* w_comp; // [64]
  const uint32_t* x[kMaxTilePanel];  // each token's u8 quads (q + 128)
  int64_t x_stride;                  // bytes
  float x_scale[kMaxTilePanel];
  float* act[kMaxTilePanel];  // each token's 32 fp32 outputs
  int n;
};
struct DownInt8Args {
  const int8_t* w;
  int64_t k_quads;
  const float* w_scale;
  const int32_t* w_comp;
  const uint32_t* x[kMaxTilePanel];
  int64_t x_stride;  // bytes
  float x_scale[kMaxTilePanel];
  float* out[kMaxTilePanel];
  float weight[kMaxTilePanel];
  int valid_rows;
  int n;
};

struct KernelTable {
  int panel;  // tokens per call the ISA's register file suits
  // bf16: panels of panel + 1 .. wide_panel tokens also run in one call, one pass over the block (0: none).
  int wide_panel;
  // AMX tiles (bf16 and int8): panels of up to tile_panel tokens in every call, x rows equally spaced (0:
  // none).
  int tile_panel;
  void (*gate_up_bf16)(const GateUpBf16Args&);
  void (*down_bf16)(const DownBf16Args&);
  void (*gate_up_int8)(const GateUpInt8Args&);
  void (*down_int8)(const DownInt8Args&);
};

const KernelTable& avx512_kernels(StreamPrefetch prefetch);
const KernelTable& avx2_kernels();
// bf16 and int8 on AMX tiles (call only where amx_usable()).
const KernelTable& amx_kernels(StreamPrefetch prefetch);

// Scalar silu(g) * u in fp32, as the fallback epilogues use it.
float silu_mul_scalar(float g, float u);

}  // namespace moe::cpu
