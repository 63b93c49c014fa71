#include "cuda/skinny_gemm.h"

#include "cuda/bf16x8.cuh"
#include "cuda/check.h"
#include "cuda/launch.h"

namespace moe::cuda {

namespace {

constexpr int kWarps = 8;  // a block's warps
constexpr int kUnroll = 4;  // 16-byte weight loads a lane keeps in flight

// The weights are read once: past L1, without keeping them there.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Each output column o is `kSplit` warps' work, each over every kSplit-th 32-chunk stretch of the row (a
// chunk: 8 values, 16 bytes); the block's kWarps / kSplit columns meet in shared memory. Splitting keeps
// enough loads in flight when `out` alone gives too few warps for the GPU (k_proj's 512 rows).
template <int kRows, int kSplit, bool kF32>
__global__ void __launch_bounds__(kWarps * 32) skinny_gemm_kernel(const __nv_bfloat16* __restrict__ x, int in,
                                                                  const __nv_bfloat16* __restrict__ w, int out,
                                                                  void* __restrict__ y) {
  constexpr int kColumns = kWarps / kSplit;
  __shared__ float partial[kWarps][kRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int o = blockIdx.x * kColumns + warp / kSplit, part = warp % kSplit;
  float acc[kRows] = {};
  // NOTE: launched dependent on the kernel before (which makes x), so that its launch overlaps that
  // kernel's tail. Prefetching the weight rows into L2 before the wait lost (48-layer Qwen3 decode, batch 1:
  // 261-266 tok/s without, 250-253 with, same call on the H200).
  allow_dependent_launch();
  wait_for_prior_grids();
  if (o < out) {
    const int chunks = in / 8;
    const auto* w_row = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(o) * in);
    const auto* x4 = reinterpret_cast<const uint4*>(x);
    constexpr int kStride = 32 * kSplit;
    int c = part * 32 + lane;
    for (; c + (kUnroll - 1) * kStride < chunks; c += kUnroll * kStride) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = load_streaming(w_row + c + u * kStride);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = dot8(wv[u], __ldg(x4 + r * chunks + c + u * kStride), acc[r]);
    }
    for (; c < chunks; c += kStride) {
      const uint4 wv = load_streaming(w_row + c);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = dot8(wv, __ldg(x4 + r * chunks + c), acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
  if (kSplit > 1) {
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kRows; ++r) partial[warp][r] = acc[r];
    __syncthreads();
    if (part != 0 || lane >= kRows || o >= out) return;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kSplit; ++s) sum += partial[warp + s][lane];
    acc[0] = sum;  // lane r holds row r's sum
  } else {
    if (lane >= kRows || o >= out) return;
    // every lane holds every row's sum after the butterfly; lane r writes row r
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r == lane) acc[0] = acc[r];
  }
  const int64_t at = static_cast<int64_t>(lane) * out + o;
  if constexpr (kF32)
    static_cast<float*>(y)[at] = acc[0];
  else
    static_cast<__nv_bfloat16*>(y)[at] = __float2bfloat16(acc[0]);
}

// Enough warps for the GPU: split each column over more warps while the columns alone give fewer than
// ~16 warps an SM.
int split_for(int64_t out) {
  const int64_t target_warps = int64_t{16} * 132;
  int split = 1;
  while (split < kWarps && out * split < target_warps) split *= 2;
  return split;
}

template <int kRows, bool kF32>
void launch_rows(const __nv_bfloat16* x, int64_t in, const __nv_bfloat16* w, int64_t out, void* y,
                 cudaStream_t stream) {
  const int split = split_for(out);
  const auto blocks = [&](int columns) { return static_cast<unsigned>((out + columns - 1) / columns); };
  const int i = static_cast<int>(in), o = static_cast<int>(out);
  const dim3 threads(kWarps * 32);
  const auto run = [&](auto kernel, int columns) {
    launch_dependent(kernel, dim3(blocks(columns)), threads, 0, stream, x, i, w, o, y);
  };
  switch (split) {
    case 1: run(skinny_gemm_kernel<kRows, 1, kF32>, kWarps); break;
    case 2: run(skinny_gemm_kernel<kRows, 2, kF32>, kWarps / 2); break;
    case 4: run(skinny_gemm_kernel<kRows, 4, kF32>, kWarps / 4); break;
    default: run(skinny_gemm_kernel<kRows, 8, kF32>, 1); break;
  }
  MOE_CUDA_CHECK(cudaGetLastError());
}

template <int kRows>
void launch(const __nv_bfloat16* x, int64_t in, const __nv_bfloat16* w, int64_t out, void* y, bool y_f32,
            cudaStream_t stream) {
  if (y_f32)
    launch_rows<kRows, true>(x, in, w, out, y, stream);
  else
    launch_rows<kRows, false>(x, in, w, out, y, stream);
}

}  // namespace

bool skinny_gemm_takes(int64_t rows, int64_t in) {
  return rows >= 1 && rows <= kSkinnyGemmMaxRows && in % 8 == 0 && in > 0 && in < (int64_t{1} << 30);
}

void skinny_gemm(const __nv_bfloat16* x, int64_t rows, int64_t in, const __nv_bfloat16* w, int64_t out, void* y,
                 bool y_f32, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(skinny_gemm_takes(rows, in) && out < (int64_t{1} << 31),
                   "skinny_gemm: " + std::to_string(rows) + " rows of " + std::to_string(in) +
                       " (1..8 rows, a multiple of 8 wide)");
  if (out == 0) return;
  switch (rows) {
    case 1: launch<1>(x, in, w, out, y, y_f32, stream); break;
    case 2: launch<2>(x, in, w, out, y, y_f32, stream); break;
    case 3: launch<3>(x, in, w, out, y, y_f32, stream); break;
    case 4: launch<4>(x, in, w, out, y, y_f32, stream); break;
    case 5: launch<5>(x, in, w, out, y, y_f32, stream); break;
    case 6: launch<6>(x, in, w, out, y, y_f32, stream); break;
    case 7: launch<7>(x, in, w, out, y, y_f32, stream); break;
    default: launch<8>(x, in, w, out, y, y_f32, stream); break;
  }
}

}  // namespace moe::cuda
