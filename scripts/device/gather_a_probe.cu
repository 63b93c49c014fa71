// A probe for the wgmma GEMM's A loads (issue 5): how fast can one block per SM fill a 4-stage ring of
// 128-row x 64-column A tiles in the 128-byte swizzle when the rows are gathered from x by a token list,
// against the contiguous tile the kernel loads today from gather_rows' copy? Three ways:
//   contiguous  one TMA box of 128 rows from the gathered copy (today's load)
//   tma_rows    128 TMA boxes of 1 row from x at each row's token (the copy engine swizzles), issued by
//               the 32 lanes of one warp
//   cp_async    128 threads x 8 cp.async of 16 bytes from x, swizzled by hand, completing on the stage's
//               mbarrier (cp.async.mbarrier.arrive.noinc)
// Each block walks tiles of 128 rows and, for each, the K/64 k-blocks, as the GEMM's producer does; one
// consumer warp waits for each stage and frees it; in a first, untimed launch it also folds the stage's bytes
// into a position-weighted checksum (so that the three ways must agree on both the data and its layout).
// No math: the rate is what the loads alone sustain. Prints GB/s of A delivered into shared memory, and the checksums.
// Build (here): nvcc -O3 -std=c++20 -arch=sm_90a -o gather_a_probe scripts/device/gather_a_probe.cu
// Run (device): ./gather_a_probe [tokens=8192] [hidden=2048] [top_k=8]
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK(x)                                                                               \
  do {                                                                                         \
    cudaError_t e = (x);                                                                       \
    if (e != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));  \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

constexpr int kRows = 128, kBK = 64, kStages = 4, kTileBytes = kRows * kBK * 2;  // 16 KB a stage
constexpr int kProducerThreads = 128, kThreads = kProducerThreads + 32;          // + one consumer warp
enum Mode { contiguous = 0, tma_rows = 1, cp_async = 2 };

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra WAIT;\n}\n" ::"r"(
          bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int32_t col, int32_t row,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

template <int MODE>
__global__ void __launch_bounds__(kThreads, 1)
    probe_kernel(const __grid_constant__ CUtensorMap map, const __nv_bfloat16* __restrict__ x,
                 const int32_t* __restrict__ row_token, int n_tiles, int hidden, unsigned long long* checksums,
                 bool verify) {
  extern __shared__ unsigned char raw[];
  unsigned char* const tiles = raw + (-smem_addr(raw) & 1023u);
  const uint32_t tiles_base = smem_addr(tiles);
  const uint32_t full = smem_addr(tiles + kStages * kTileBytes), empty = full + 8 * kStages;
  const int tid = threadIdx.x, k_blocks = hidden / kBK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, MODE == cp_async ? kProducerThreads : 1);
      mbar_init(empty + 8 * s, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int stage = 0;
  uint32_t phase = 0;
  if (tid < kProducerThreads) {
    const int warp = tid / 32, lane = tid % 32;
    if (MODE != cp_async && warp != 0) return;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
      // The tokens this thread loads rows of: its own row (cp_async), or rows lane + 32j (tma_rows).
      int32_t token[4];
      for (int j = 0; j < 4; ++j) token[j] = row_token[t * kRows + (MODE == cp_async ? tid : lane + 32 * j)];
      for (int kb = 0; kb < k_blocks; ++kb) {
        mbar_wait(empty + 8 * stage, phase ^ 1);
        const uint32_t dst = tiles_base + stage * kTileBytes, bar = full + 8 * stage;
        if constexpr (MODE == contiguous) {
          if (lane == 0) {
            mbar_expect_tx(bar, kTileBytes);
            tma_load_2d(dst, &map, kb * kBK, t * kRows, bar);
          }
        } else if constexpr (MODE == tma_rows) {
          if (lane == 0) mbar_expect_tx(bar, kTileBytes);
          __syncwarp();
          for (int j = 0; j < 4; ++j) tma_load_2d(dst + (lane + 32 * j) * 128, &map, kb * kBK, token[j], bar);
        } else {
          const __nv_bfloat16* src = x + int64_t{token[0]} * hidden + kb * kBK;
#pragma unroll
          for (int c = 0; c < 8; ++c) {
            const uint32_t to = dst + tid * 128 + ((c ^ (tid % 8)) * 16);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(src + c * 8) : "memory");
          }
          asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
        }
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
  } else {
    const int lane = tid % 32;
    unsigned long long sum = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
      for (int kb = 0; kb < k_blocks; ++kb) {
        mbar_wait(full + 8 * stage, phase);
        const uint4* v = reinterpret_cast<const uint4*>(tiles + stage * kTileBytes);
        for (int i = lane; verify && i < kTileBytes / 16; i += 32) {
          const uint4 q = v[i];
          sum += (unsigned long long)(q.x ^ q.y ^ q.z ^ q.w) * (unsigned long long)(i + 1);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * stage);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) atomicAdd(checksums + MODE, sum);
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

CUtensorMap map_of(const void* base, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)}, element_strides[2] = {1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 8192, H = argc > 2 ? std::atoi(argv[2]) : 2048,
            k = argc > 3 ? std::atoi(argv[3]) : 8;
  const int rows = T * k, n_tiles = rows / kRows;
  std::mt19937 rng(1);
  std::vector<uint16_t> x(int64_t{T} * H);
  for (auto& v : x) v = static_cast<uint16_t>(rng());
  std::vector<int32_t> token(rows);
  for (auto& t : token) t = static_cast<int32_t>(rng() % T);
  std::vector<uint16_t> gathered(int64_t{rows} * H);
  for (int r = 0; r < rows; ++r)
    std::copy_n(x.begin() + int64_t{token[r]} * H, H, gathered.begin() + int64_t{r} * H);
  void *d_x, *d_gathered;
  int32_t* d_token;
  unsigned long long* d_sums;
  CHECK(cudaMalloc(&d_x, x.size() * 2));
  CHECK(cudaMalloc(&d_gathered, gathered.size() * 2));
  CHECK(cudaMalloc(&d_token, token.size() * 4));
  CHECK(cudaMalloc(&d_sums, 3 * sizeof(unsigned long long)));
  CHECK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_gathered, gathered.data(), gathered.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_token, token.data(), token.size() * 4, cudaMemcpyHostToDevice));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const CUtensorMap map_tile = map_of(d_gathered, rows, H, kRows), map_row = map_of(d_x, T, H, 1);
  const size_t smem = kStages * kTileBytes + 1024 + 16 * kStages;
  const double bytes = double(rows) * H * 2;
  std::printf("T %d, H %d, k %d: %d rows, %.0f MB of A a pass, x %.0f MB, %d blocks\n", T, H, k, rows, bytes / 1e6,
              double(T) * H * 2 / 1e6, sms);
  const char* names[3] = {"contiguous", "tma_rows", "cp_async"};
  auto run = [&]<int MODE>() {
    auto kernel = probe_kernel<MODE>;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const CUtensorMap& map = MODE == contiguous ? map_tile : map_row;
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    float best = 1e30f;
    CHECK(cudaMemset(d_sums, 0, 3 * sizeof(unsigned long long)));
    for (int rep = 0; rep < 6; ++rep) {
      CHECK(cudaEventRecord(a));
      // The first launch checks (the checksum), the others are timed (the consumer only frees the stages).
      kernel<<<sms, kThreads, smem>>>(map, reinterpret_cast<const __nv_bfloat16*>(d_x), d_token, n_tiles, H, d_sums,
                                      rep == 0);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      if (rep > 0 && ms < best) best = ms;
    }
    unsigned long long sums[3];
    CHECK(cudaMemcpy(sums, d_sums, sizeof(sums), cudaMemcpyDeviceToHost));
    std::printf("%-11s %8.1f us  %6.2f TB/s  checksum %016llx\n", names[MODE], best * 1e3, bytes / (best * 1e-3) / 1e12,
                sums[MODE]);
  };
  run.template operator()<contiguous>();
  run.template operator()<cp_async>();
  run.template operator()<tma_rows>();  // last: a misaligned box would stop the program here
  return 0;
}
