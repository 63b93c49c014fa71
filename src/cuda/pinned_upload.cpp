#include "cuda/pinned_upload.h"

#include <algorithm>
#include <cstring>

#include "cuda/check.h"

namespace moe::cuda {

PinnedUpload::PinnedUpload(size_t chunk_bytes, int chunks) : chunk_bytes_(chunk_bytes) {
  MOE_CUDA_REQUIRE(chunk_bytes > 0 && chunks >= 2, "PinnedUpload needs at least two chunks of some bytes");
  MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  for (int i = 0; i < chunks; ++i) {
    void* p = nullptr;
    MOE_CUDA_CHECK(cudaMallocHost(&p, chunk_bytes));
    chunks_.push_back(static_cast<unsigned char*>(p));
    cudaEvent_t e = nullptr;
    MOE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    MOE_CUDA_CHECK(cudaEventRecord(e, stream_));
    done_.push_back(e);
  }
}

PinnedUpload::~PinnedUpload() {
  // NOTE: the chunks may still be read by copies in flight: wait before freeing them.
  cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
  for (unsigned char* p : chunks_) cudaFreeHost(p);
  cudaStreamDestroy(stream_);
}

unsigned char* PinnedUpload::next_chunk() {
  MOE_CUDA_CHECK(cudaEventSynchronize(done_[next_]));
  return chunks_[next_];
}

void PinnedUpload::issued() {
  MOE_CUDA_CHECK(cudaEventRecord(done_[next_], stream_));
  next_ = (next_ + 1) % chunks_.size();
}

void PinnedUpload::copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk_bytes_, bytes - done);
    unsigned char* chunk = next_chunk();
    std::memcpy(chunk, s + done, n);
    MOE_CUDA_CHECK(cudaMemcpyAsync(d + done, chunk, n, cudaMemcpyHostToDevice, stream_));
    issued();
    done += n;
  }
}

void PinnedUpload::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                             size_t rows) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (row_bytes == 0 || rows == 0) return;
  if (row_bytes > chunk_bytes_) {  // a row spans chunks: row by row
    for (size_t r = 0; r < rows; ++r) copy(d + r * dst_pitch, s + r * src_pitch, row_bytes);
    return;
  }
  const size_t per_chunk = chunk_bytes_ / row_bytes;
  for (size_t r0 = 0; r0 < rows; r0 += per_chunk) {
    const size_t n = std::min(per_chunk, rows - r0);
    unsigned char* chunk = next_chunk();
    for (size_t r = 0; r < n; ++r) std::memcpy(chunk + r * row_bytes, s + (r0 + r) * src_pitch, row_bytes);
    MOE_CUDA_CHECK(cudaMemcpy2DAsync(d + r0 * dst_pitch, dst_pitch, chunk, row_bytes, row_bytes, n,
                                     cudaMemcpyHostToDevice, stream_));
    issued();
  }
}

void PinnedUpload::zero(void* dst, size_t bytes) { MOE_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_)); }

void PinnedUpload::finish() { MOE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace moe::cuda
