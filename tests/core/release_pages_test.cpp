// release_mapped_pages: a mapped tensor's pages leave this process's resident set and read back the same;
// memory that is not a file mapping is never touched.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "moe/core/safetensors.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

// This process's resident bytes (/proc/self/statm).
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

TEST(ReleaseMappedPages, DropsResidentPagesAndKeepsTheData) {
  TempDir dir;
  constexpr int64_t kElements = int64_t{16} << 20;  // 64 MiB of F32
  std::vector<float> values(kElements);
  for (int64_t i = 0; i < kElements; ++i) values[i] = static_cast<float>(i % 1000);
  write_safetensors(dir / "w.safetensors", {{"w", Tensor::from_f32({kElements}, values)}});
  const SafetensorsFile file = SafetensorsFile::open(dir / "w.safetensors");
  const Tensor w = file.get("w");
  double sum = 0;
  for (int64_t i = 0; i < kElements; ++i) sum += w.data_as<float>()[i];  // every page resident
  const int64_t before = resident_bytes();
  release_mapped_pages(w);
  const int64_t after = resident_bytes();
  EXPECT_GT(before - after, w.nbytes() / 2) << "resident " << before << " -> " << after;
  double again = 0;
  for (int64_t i = 0; i < kElements; ++i) again += w.data_as<float>()[i];
  EXPECT_EQ(sum, again);
}

TEST(ReleaseMappedPages, LeavesOtherMemoryAlone) {
  const std::vector<float> values(1 << 20, 3.0f);
  const Tensor heap = Tensor::from_f32({1 << 20}, values);
  release_mapped_pages(heap);
  EXPECT_EQ(std::memcmp(heap.data(), values.data(), heap.nbytes()), 0);
}

}  // namespace
}  // namespace moe::test
