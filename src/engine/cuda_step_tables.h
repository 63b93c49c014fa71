#pragma once
// The tables a forward's ops read on the GPU, built on the host from its StepInputs and sent over in one
// copy before the forward's first op: the ids, positions, each row's cache slot (-1: a padding row), the
// block tables of the spans with each row's table and visible length, the rows lm_head reads and the token
// choices. An eager forward's go into a fresh device buffer (a kernel still reading the last one is
// undisturbed: the old buffer is freed in stream order); a recorded step's into one buffer per bucket that
// stays where its recording reads it, each sequence's block table at a fixed stride of the longest table.

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>

#include "cuda/decoder_kernels.h"
#include "model/decoder_ops.h"

namespace moe::engine {

class CudaStepTables {
 public:
  // The device pointers into this step's tables; valid until the next upload.
  struct View {
    int64_t rows = 0, spans = 0, max_sequence_rows = 0;
    const int32_t* ids = nullptr;            // [rows]
    const int64_t* positions = nullptr;      // [rows]
    const int32_t* slots = nullptr;          // [rows] pool rows, -1 for padding
    const int32_t* block_tables = nullptr;   // the spans' block tables
    const int32_t* row_table = nullptr;      // [rows] offset of the row's table in block_tables
    const int32_t* row_visible = nullptr;    // [rows] cached tokens the row sees (itself included)
    const int32_t* last_rows = nullptr;      // [n_last_rows]
    int64_t n_last_rows = 0;
    const cuda::TokenChoiceArgs* choices = nullptr;  // [n_choices]
    int64_t n_choices = 0;
  };

  CudaStepTables() = default;
  CudaStepTables(const CudaStepTables&) = delete;
  CudaStepTables& operator=(const CudaStepTables&) = delete;
  ~CudaStepTables();

  // Builds and sends the step's tables on `stream` (stream-ordered after the work already queued there).
  const View& upload(const model::StepInputs& step, cudaStream_t stream);
  // The last upload's; a moe::Error when there has been none.
  const View& view() const;

 private:
  void reserve_host(size_t bytes);

  View view_;
  bool uploaded_ = false;
  void* host_ = nullptr;  // page-locked staging
  size_t host_bytes_ = 0;
  cudaEvent_t copied_ = nullptr;  // the last copy out of host_
  Tensor eager_;                       // the last eager forward's tables
  std::map<int64_t, Tensor> recorded_;  // per bucket, at the address its recording reads
};

}  // namespace moe::engine
