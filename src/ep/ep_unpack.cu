// Unpacking what dispatch received: pairs to local slot ids and weights, fp8 rows decoded to bf16 (the
// grouped GEMMs read bf16), and the unused pairs masked out of the permuted layout.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "ep_kernels.h"
#include "cuda/check.h"

namespace moe::ep::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kFp8Block = 128;

__global__ void unpack_kernel(const WirePair* __restrict__ pairs, int64_t n_pairs, int unused_slot,
                              int32_t* __restrict__ slot_ids, float* __restrict__ weights) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n_pairs) return;
  const WirePair p = pairs[i];
  slot_ids[i] = p.slot < 0 ? unused_slot : p.slot;
  weights[i] = p.slot < 0 ? 0.0f : p.weight;
}

// One block per copy; 4 values a thread (one fp32 scale per 128 values).
__global__ void decode_kernel(const uint8_t* __restrict__ rows, int64_t hidden, int64_t row_bytes,
                              bf16* __restrict__ out) {
  const int64_t c = blockIdx.x;
  const uint8_t* src = rows + c * row_bytes;
  const float* scales = reinterpret_cast<const float*>(src + hidden);
  for (int64_t h = threadIdx.x * int64_t{4}; h < hidden; h += kThreads * 4) {
    const uint32_t bytes = *reinterpret_cast<const uint32_t*>(src + h);
    const float scale = scales[h / kFp8Block];
    float v[4];
    for (int i = 0; i < 4; ++i) {
      const __half_raw half = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bytes >> (8 * i)), __NV_E4M3);
      v[i] = __half2float(__half(half)) * scale;
    }
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + c * hidden + h);
    dst[0] = __floats2bfloat162_rn(v[0], v[1]);
    dst[1] = __floats2bfloat162_rn(v[2], v[3]);
  }
}

__global__ void mask_kernel(const int32_t* __restrict__ slot_ids, int64_t n_pairs, int unused_slot,
                            int32_t* __restrict__ pair_rows) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n_pairs && slot_ids[i] == unused_slot) pair_rows[i] = -1;
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void ep_unpack(const WirePair* pairs, int64_t n_copies, int top_k, int unused_slot, int32_t* slot_ids, float* weights,
               cudaStream_t stream) {
  const int64_t n_pairs = n_copies * top_k;
  if (n_pairs == 0) return;
  unpack_kernel<<<blocks_for(n_pairs), kThreads, 0, stream>>>(pairs, n_pairs, unused_slot, slot_ids, weights);
  MOE_CUDA_CHECK_LAUNCH();
}

void ep_decode_fp8(const uint8_t* rows, int64_t n_copies, int64_t hidden, int64_t row_bytes, bf16* out,
                   cudaStream_t stream) {
  MOE_CUDA_REQUIRE(hidden % 64 == 0, "ep_decode_fp8 needs a hidden size that is a multiple of 64");
  if (n_copies == 0) return;
  decode_kernel<<<static_cast<unsigned>(n_copies), kThreads, 0, stream>>>(rows, hidden, row_bytes, out);
  MOE_CUDA_CHECK_LAUNCH();
}

void ep_mask_unused(const int32_t* slot_ids, int64_t n_pairs, int unused_slot, int32_t* pair_rows,
                    cudaStream_t stream) {
  if (n_pairs == 0) return;
  mask_kernel<<<blocks_for(n_pairs), kThreads, 0, stream>>>(slot_ids, n_pairs, unused_slot, pair_rows);
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace moe::ep::kernels
