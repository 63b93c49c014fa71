#pragma once
// What the stand-alone weight-stream probes (decode_stream_probe.cu, launch_probe.cu) share: a CUDA error check
// for main() and the fused decode kernel's streamed load (src/cuda/decode.cu's load_stream, on uint4 pointers).
#include <cuda_runtime.h>

#include <cstdio>

// In main(): prints the failing call's error and returns 1.
#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t status_ = (x);                                                    \
    if (status_ != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

// 16 bytes of a weight stream, read once: they skip L1.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
