// A probe for the fused decode kernel's weight stream (issue 5, bench/RESULTS.md 18th session): does a
// grid of one block per SM stream the same bytes slower when each block's rows are spread over every chosen
// expert than when they are one contiguous range? The 18th session's per-expert waits dealt the gate+up
// rows round robin and the gate+up phase took 15.5 us against 12.6; this isolates the access pattern from
// the kernel's synchronisation. Qwen3-30B-A3B T=1's gate+up stream: 8 experts of 1,536 rows of 4 KiB
// (48 MiB), chosen at random among 128 per launch so that they come from DRAM. Three ways a block gets rows:
//   contiguous  block b: rows [R b / G, R (b + 1) / G) of the flattened rows (1-2 experts a block)
//   round_robin row r to block r % G (every expert)
//   slices      of every expert, rows [n b / G, n (b + 1) / G) (6 consecutive rows of each expert)
// Each warp reads a row as the kernel does (16-byte loads that skip L1, 8 a lane in flight, two rows at a
// time for gate and up). Prints the median time of 200 launches and the rate for each.
// Build (here): nvcc -O3 -std=c++20 -arch=sm_90a -o decode_stream_probe scripts/device/decode_stream_probe.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "probe_common.cuh"

namespace {

constexpr int kExperts = 128, kChosen = 8, kRows = 1536, kRowBytes = 4096, kThreads = 512;

// Rows in pairs (gate row i and up row i + 768 of an expert, as the kernel reads them).
__global__ void __launch_bounds__(kThreads, 1) stream_rows(const uint4* weights, const int* chosen, int mode,
                                                            unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = kThreads / 32;
  const int G = gridDim.x, b = blockIdx.x, half = kRows / 2, pairs = kChosen * half;
  int begin = 0, end = 0, count = 0;
  if (mode == 0) {
    begin = int64_t{pairs} * b / G, end = int64_t{pairs} * (b + 1) / G, count = end - begin;
  } else if (mode == 1) {
    count = b < pairs ? (pairs - 1 - b) / G + 1 : 0;
  } else {
    count = kChosen * (int((int64_t{half} * (b + 1) / G) - int64_t{half} * b / G));
  }
  unsigned acc = 0;
  for (int j = warp; j < count; j += warps) {
    int pair;
    if (mode == 0) {
      pair = begin + j;
    } else if (mode == 1) {
      pair = b + j * G;
    } else {
      const int per = int(int64_t{half} * (b + 1) / G - int64_t{half} * b / G);
      pair = (j / per) * half + int(int64_t{half} * b / G) + j % per;
    }
    const int e = chosen[pair / half], i = pair % half;
    const uint4* gate = weights + (int64_t{e} * kRows + i) * (kRowBytes / 16);
    const uint4* up = weights + (int64_t{e} * kRows + half + i) * (kRowBytes / 16);
    uint4 g[8], u[8];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      g[r] = load_stream(gate + r * 32 + lane);
      u[r] = load_stream(up + r * 32 + lane);
    }
#pragma unroll
    for (int r = 0; r < 8; ++r) acc ^= g[r].x ^ g[r].w ^ u[r].y ^ u[r].z;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t bytes = size_t{kExperts} * kRows * kRowBytes;
  uint4* weights = nullptr;
  int* chosen = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&weights, bytes));
  CHECK(cudaMemset(weights, 1, bytes));
  constexpr int kLaunches = 200;
  CHECK(cudaMalloc(&chosen, sizeof(int) * kChosen * kLaunches));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  std::mt19937 rng(7);
  std::vector<int> sets;
  for (int l = 0; l < kLaunches; ++l) {
    std::vector<int> all(kExperts);
    for (int e = 0; e < kExperts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + kChosen);
    sets.insert(sets.end(), all.begin(), all.begin() + kChosen);
  }
  CHECK(cudaMemcpy(chosen, sets.data(), sizeof(int) * sets.size(), cudaMemcpyHostToDevice));
  const char* names[] = {"contiguous", "round_robin", "slices"};
  cudaEvent_t events[kLaunches + 1];
  for (auto& event : events) CHECK(cudaEventCreate(&event));
  for (int round = 0; round < 3; ++round)
    for (int mode = 0; mode < 3; ++mode) {
      for (int l = 0; l < kLaunches; ++l) {
        CHECK(cudaEventRecord(events[l]));
        stream_rows<<<sms, kThreads>>>(weights, chosen + l * kChosen, mode, sink);
      }
      CHECK(cudaEventRecord(events[kLaunches]));
      CHECK(cudaEventSynchronize(events[kLaunches]));
      std::vector<float> us(kLaunches);
      for (int l = 0; l < kLaunches; ++l) {
        CHECK(cudaEventElapsedTime(&us[l], events[l], events[l + 1]));
        us[l] *= 1e3f;
      }
      std::sort(us.begin(), us.end());
      const double moved = double(kChosen) * kRows * kRowBytes;
      std::printf("round %d %-12s median %7.2f us  %5.2f TB/s\n", round, names[mode], us[kLaunches / 2],
                  moved / (us[kLaunches / 2] * 1e-6) / 1e12);
    }
  return 0;
}
