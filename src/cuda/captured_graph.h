#pragma once
// A CUDA graph of the work a callable puts on a stream: captured, instantiated, and destroyed with the
// object; launch() replays it. One place for the capture boilerplate of the benchmarks and the tests.

#include <cuda_runtime.h>

#include <utility>

#include "cuda/check.h"

namespace moe::cuda {

class CapturedGraph {
 public:
  // Global capture mode (the default) also fails on a CUDA call that is unsafe during capture made by any
  // other thread meanwhile; the benchmarks, which run nothing else, capture thread-locally.
  template <class Enqueue>
  CapturedGraph(cudaStream_t stream, Enqueue&& enqueue, cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
    cudaGraph_t graph = nullptr;
    MOE_CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
    try {
      enqueue();
    } catch (...) {
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    MOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    MOE_CUDA_CHECK(instantiated);
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  CapturedGraph(CapturedGraph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  CapturedGraph& operator=(CapturedGraph&& other) noexcept {
    std::swap(exec_, other.exec_);
    return *this;
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(cudaStream_t stream) const { MOE_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace moe::cuda
