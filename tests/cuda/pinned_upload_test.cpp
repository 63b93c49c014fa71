// PinnedUpload against a plain copy: contiguous copies longer than the whole ring (its chunks reused many
// times), 2-D copies into a wider pitch from a strided source, rows longer than a chunk, and zeroed padding
// ordered before the copies that follow. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/pinned_upload.h"
#include "cuda_test_util.h"

namespace moe::test {
namespace {

std::vector<uint8_t> download(const cuda::DeviceBuffer<uint8_t>& d) {
  std::vector<uint8_t> h(d.size());
  MOE_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), d.size(), cudaMemcpyDeviceToHost));
  return h;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed + i / 251);
  return v;
}

TEST(PinnedUpload, ContiguousCopiesLongerThanTheRing) {
  MOE_SKIP_WITHOUT_GPU();
  cuda::PinnedUpload upload(/*chunk_bytes=*/1000, /*chunks=*/3);
  const std::vector<uint8_t> a = pattern(10'007, 1), b = pattern(999, 2);
  cuda::DeviceBuffer<uint8_t> d(a.size() + b.size());
  upload.copy(d.get(), a.data(), a.size());
  upload.copy(d.get() + a.size(), b.data(), b.size());
  upload.finish();
  std::vector<uint8_t> want = a;
  want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(download(d), want);
}

TEST(PinnedUpload, RowsIntoAWiderPitchAfterZeroing) {
  MOE_SKIP_WITHOUT_GPU();
  for (const size_t chunk : {size_t{64}, size_t{100}, size_t{4096}}) {  // rows of 70 bytes: > and < a chunk
    cuda::PinnedUpload upload(chunk, 2);
    constexpr size_t kRows = 37, kRowBytes = 70, kSrcPitch = 90, kDstPitch = 128;
    const std::vector<uint8_t> src = pattern(kRows * kSrcPitch, 7);
    cuda::DeviceBuffer<uint8_t> d(kRows * kDstPitch);
    MOE_CUDA_CHECK(cudaMemset(d.get(), 0xff, d.size()));
    MOE_CUDA_CHECK(cudaDeviceSynchronize());  // the upload's stream does not wait for the legacy one
    upload.zero(d.get(), d.size());
    upload.copy_rows(d.get(), kDstPitch, src.data(), kSrcPitch, kRowBytes, kRows);
    upload.finish();
    std::vector<uint8_t> want(d.size(), 0);
    for (size_t r = 0; r < kRows; ++r)
      std::copy_n(src.begin() + r * kSrcPitch, kRowBytes, want.begin() + r * kDstPitch);
    EXPECT_EQ(download(d), want) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace moe::test
