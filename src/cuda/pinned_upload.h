#pragma once
// Host-to-device copies staged through a small ring of page-locked chunks on a stream of their own: the
// host copies the next chunk out of its source (a checkpoint's memory map: page faults, disk reads) while
// the last one crosses PCIe, where a copy from pageable memory would do the two one after the other. The
// source needs to stay valid only during the call; the device memory is written once finish() returns.

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace moe::cuda {

class PinnedUpload {
 public:
  explicit PinnedUpload(size_t chunk_bytes = size_t{4} << 20, int chunks = 4);
  ~PinnedUpload();
  PinnedUpload(const PinnedUpload&) = delete;
  PinnedUpload& operator=(const PinnedUpload&) = delete;

  // `bytes` from host `src` to device `dst`.
  void copy(void* dst, const void* src, size_t bytes);
  // `rows` rows of `row_bytes` from host `src` (a row every `src_pitch` bytes) to device `dst` (a row every
  // `dst_pitch` bytes): one 2-D copy per chunk of whole rows.
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows);
  // Zeroes `bytes` of device memory at `dst`, ordered with the copies (padding the copies do not cover).
  void zero(void* dst, size_t bytes);
  // Waits until every copy so far is on the device.
  void finish();

 private:
  // The next chunk, once the device is done reading it.
  unsigned char* next_chunk();
  // Marks the chunk next_chunk() returned as in flight.
  void issued();

  size_t chunk_bytes_;
  cudaStream_t stream_ = nullptr;
  std::vector<unsigned char*> chunks_;  // page-locked
  std::vector<cudaEvent_t> done_;       // [chunks] recorded after the copy that last read the chunk
  size_t next_ = 0;
};

}  // namespace moe::cuda
