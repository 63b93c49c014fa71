#pragma once
// An ordered queue of work on one device, opaque to the code that only passes it along (the layer and its
// stages): a cudaStream_t on a CUDA device (null: the legacy default stream), nothing on the host, where a
// stage's work is done when its call returns. core builds without CUDA, so the handle is a plain pointer that
// only CUDA code casts back.

#include "moe/core/tensor.h"

namespace moe {

class Stream {
 public:
  // The host: no queue.
  Stream() = default;
  // A CUDA stream (a cudaStream_t passed as void*; null is the legacy default stream).
  static Stream cuda(void* handle) {
    Stream s;
    s.device_ = Device::cuda;
    s.handle_ = handle;
    return s;
  }

  Device device() const { return device_; }
  // The cudaStream_t of a CUDA stream; null on the host.
  void* handle() const { return handle_; }

 private:
  Device device_ = Device::cpu;
  void* handle_ = nullptr;
};

}  // namespace moe
