// Warp-level tensor-core primitives (sm_80 and later): ldmatrix from shared memory and the bf16 m16n8k16
// mma with fp32 accumulation; the e4m3 m16n8k32 mma on sm_89 and later. Fragment layouts (g = lane / 4, t = lane % 4): A 16x16 row-major a0 (row g,
// cols 2t, 2t+1), a1 (row g + 8), a2 (cols + 8), a3 (row g + 8, cols + 8); B 16x8 b0 (rows 2t, 2t+1, col g),
// b1 (rows + 8); C 16x8 c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g + 8).
#pragma once

#include <cuda_bf16.h>

namespace moe::cuda {

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const __nv_bfloat16* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same, each matrix transposed: from rows of a row-major [k][n] tile, B fragments (k pairs per lane).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const __nv_bfloat16* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a · b (m16n8k16, bf16 in, fp32 accumulate).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a · b (m16n8k32, e4m3 in, fp32 accumulate). Its fragments hold 4 e4m3 values a register where the
// bf16 ones hold 2, at the same byte offsets: a0 (row g, k bytes 4t..4t+3), a1 (row g + 8), a2 (k + 16),
// a3 (row g + 8, k + 16); b0 (k 4t..4t+3, col g), b1 (k + 16). So a row-major tile of e4m3 bytes loads
// with the same ldmatrix addressing as a bf16 tile of half its k. On older GPUs it traps (the host checks
// fp8_grouped_gemm_available before launching).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

}  // namespace moe::cuda
