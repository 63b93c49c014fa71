// Seeded random weights made in device memory (a model shape benched without a checkpoint): every element
// a pure function of (seed, index) through splitmix64, as layer/random_weights.cpp does on the host, so a
// tensor is the same whatever the launch shape.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/decoder_kernels.h"

namespace moe::cuda {

namespace {

__host__ __device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__global__ void fill_uniform_kernel(T* __restrict__ x, int64_t n, float half_width, uint64_t base) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = float(splitmix64(base ^ uint64_t(i)) >> 40) * 0x1.0p-24f;  // [0, 1)
    const float v = (2.0f * u - 1.0f) * half_width;
    if constexpr (sizeof(T) == 2)
      x[i] = __float2bfloat16(v);
    else
      x[i] = v;
  }
}

template <class T>
void launch_fill(T* x, int64_t n, float stddev, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
  // uniform(-a, a) has stddev a / sqrt(3)
  fill_uniform_kernel<<<blocks, 256, 0, stream>>>(x, n, stddev * 1.7320508f, splitmix64(seed));
  MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill_uniform(bf16* x, int64_t n, float stddev, uint64_t seed, cudaStream_t stream) {
  launch_fill(x, n, stddev, seed, stream);
}

void fill_uniform(float* x, int64_t n, float stddev, uint64_t seed, cudaStream_t stream) {
  launch_fill(x, n, stddev, seed, stream);
}

}  // namespace moe::cuda
