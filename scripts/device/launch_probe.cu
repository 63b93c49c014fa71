// A probe for issue 5's T = 1 target (Qwen3-30B-A3B <= 24 us, whole layer replayed from a CUDA graph): what
// does a kernel of the fused decode kernel's shape cost before it does any work, and how fast can such a
// kernel stream Qwen3 T=1's weights if the experts were known at its start (routing free)? Every time is a
// graph replay between two events, as `moe bench` times the layer (median of 400), and per kernel of a graph
// of 8 launches in a row (as a model's layers run):
//   empty      the decode kernel's launch: 132 blocks of 512 threads, 36 KB of dynamic shared memory,
//              cooperative; no work
//   barrier    the same with one grid barrier (decode.cu's scheme: one atomic a block, the top bit flips)
//   stream     no routing: 8 experts chosen at random among 128 per graph (8 graphs rotated, so the weights
//              come from DRAM) streamed as the kernel streams them, gate+up rows (48 MiB) then down rows
//              (24 MiB), 16-byte loads that skip L1, 8 in flight a lane; the floor's bytes at the copy rate
//   stream+barrier  the same with a grid barrier between the two phases, as the kernel has
// Build (here): nvcc -O3 -std=c++20 -arch=sm_90a -o launch_probe scripts/device/launch_probe.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "probe_common.cuh"

namespace {

constexpr int kExperts = 128, kChosen = 8, kThreads = 512, kSmem = 36 << 10;
constexpr int kH = 2048, kI = 768;
constexpr int64_t kUpChunks = int64_t{2} * kI * kH / 8;  // 16-byte chunks of an expert's gate+up rows
constexpr int64_t kDownChunks = int64_t{kH} * kI / 8;    // ... of its down rows

struct Args {
  const uint4* w13;  // [E][2I][H] bf16
  const uint4* w2;   // [E][H][I] bf16
  const int* chosen;  // [kChosen]
  unsigned* barrier;
  unsigned* sink;
  int mode;  // 0 empty, 1 barrier, 2 stream, 3 stream + barrier
};

__device__ __forceinline__ void grid_barrier(unsigned* barrier) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned old;
    asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(barrier), "r"(blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u)
                 : "memory");
    unsigned now;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(barrier) : "memory");
    } while (((old ^ now) & 0x80000000u) == 0);
  }
  __syncthreads();
}

// The block's share of n chunks of each chosen expert's matrix, 8 loads a lane in flight.
template <int64_t chunks>
__device__ unsigned stream_share(const uint4* base, const int* chosen) {
  const int64_t total = kChosen * chunks, per_round = int64_t{kThreads} * 8;
  const int64_t begin = total * blockIdx.x / gridDim.x, end = total * (blockIdx.x + 1) / gridDim.x;
  unsigned acc = 0;
  for (int64_t c0 = begin + threadIdx.x; c0 < end; c0 += per_round) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t c = c0 + int64_t{u} * kThreads;
      v[u] = c < end ? load_stream(base + int64_t{chosen[c / chunks]} * chunks + c % chunks) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  return acc;
}

__global__ void __launch_bounds__(kThreads, 1) probe_kernel(const Args a) {
  extern __shared__ unsigned char smem[];
  if (a.mode == 0) return;
  unsigned acc = 0;
  if (a.mode >= 2) acc ^= stream_share<kUpChunks>(a.w13, a.chosen);
  if (a.mode == 1 || a.mode == 3) grid_barrier(a.barrier);
  if (a.mode >= 2) acc ^= stream_share<kDownChunks>(a.w2, a.chosen);
  if (acc == 0x12345678u) a.sink[0] = acc + smem[threadIdx.x];  // keeps the loads
}

void launch(const Args& a, int blocks, cudaStream_t stream) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  cudaLaunchKernelEx(&config, probe_kernel, a);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  uint4 *w13 = nullptr, *w2 = nullptr;
  int* chosen = nullptr;
  unsigned *barrier = nullptr, *sink = nullptr;
  CHECK(cudaMalloc(&w13, size_t{kExperts} * kUpChunks * 16));
  CHECK(cudaMalloc(&w2, size_t{kExperts} * kDownChunks * 16));
  CHECK(cudaMemset(w13, 1, size_t{kExperts} * kUpChunks * 16));
  CHECK(cudaMemset(w2, 1, size_t{kExperts} * kDownChunks * 16));
  constexpr int kGraphs = 8;
  CHECK(cudaMalloc(&chosen, sizeof(int) * kChosen * kGraphs));
  CHECK(cudaMalloc(&barrier, 4));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(barrier, 0, 4));
  std::mt19937 rng(7);
  std::vector<int> host(kChosen * kGraphs);
  for (int g = 0; g < kGraphs; ++g) {
    std::vector<int> all(kExperts);
    for (int e = 0; e < kExperts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + kChosen);
    std::copy(all.begin(), all.begin() + kChosen, host.begin() + g * kChosen);
  }
  CHECK(cudaMemcpy(chosen, host.data(), sizeof(int) * host.size(), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double bytes = double(kChosen) * (kUpChunks + kDownChunks) * 16;
  std::printf("probe            graph us  per kernel of 8 us   (stream: %.1f MB)\n", bytes / 1e6);
  const char* names[] = {"empty", "barrier", "stream", "stream+barrier"};
  for (int mode = 0; mode < 4; ++mode) {
    cudaGraphExec_t single[kGraphs], chained[kGraphs];
    for (int g = 0; g < kGraphs; ++g) {
      const Args a{w13, w2, chosen + g * kChosen, barrier, sink, mode};
      for (int chain : {1, 8}) {
        cudaGraph_t graph;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < chain; ++i) launch(a, sms, stream);
        CHECK(cudaStreamEndCapture(stream, &graph));
        CHECK(cudaGraphInstantiate(chain == 1 ? &single[g] : &chained[g], graph, 0));
        CHECK(cudaGraphDestroy(graph));
      }
    }
    const auto time = [&](cudaGraphExec_t* graphs, int runs) {
      std::vector<cudaEvent_t> events(2 * runs);
      for (auto& e : events) cudaEventCreate(&e);
      for (int r = 0; r < 16; ++r) cudaGraphLaunch(graphs[r % kGraphs], stream);
      for (int r = 0; r < runs; ++r) {
        cudaEventRecord(events[2 * r], stream);
        cudaGraphLaunch(graphs[r % kGraphs], stream);
        cudaEventRecord(events[2 * r + 1], stream);
      }
      cudaStreamSynchronize(stream);
      std::vector<float> us(runs);
      for (int r = 0; r < runs; ++r) {
        cudaEventElapsedTime(&us[r], events[2 * r], events[2 * r + 1]);
        us[r] *= 1e3f;
      }
      for (auto& e : events) cudaEventDestroy(e);
      std::sort(us.begin(), us.end());
      return us[runs / 2];
    };
    const float one = time(single, 400), eight = time(chained, 100) / 8;
    CHECK(cudaGetLastError());
    std::printf("%-15s %9.2f %20.2f", names[mode], one, eight);
    if (mode >= 2) std::printf("   %.2f TB/s a kernel of 8", bytes / (eight * 1e-6) / 1e12);
    std::printf("\n");
    for (int g = 0; g < kGraphs; ++g) {
      cudaGraphExecDestroy(single[g]);
      cudaGraphExecDestroy(chained[g]);
    }
  }
  return 0;
}
