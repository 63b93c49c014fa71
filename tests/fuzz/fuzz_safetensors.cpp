// The safetensors reader on arbitrary bytes: open, then read every tensor whole and compare it with the
// bytes the header's data_offsets name in the input (a view outside the file would fault, be reported by
// the sanitizers, or differ).
#include <cstring>

#include "fuzz_target.h"
#include "moe/core/safetensors.h"

namespace moe::fuzz {

int fuzz_safetensors(const uint8_t* data, size_t size) {
  const std::filesystem::path path = scratch_dir() / "fuzz.safetensors";
  write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  return expect_errors([&] {
    const SafetensorsFile file = SafetensorsFile::open(path);
    // The file opened, so it has the 8-byte length and a header inside it.
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | data[i];
    MOE_FUZZ_ASSERT(size >= 8 && header_bytes <= size - 8, "opened a file whose header length {} exceeds {} bytes",
                    header_bytes, size);
    const uint8_t* data_section = data + 8 + header_bytes;
    const uint64_t data_size = size - 8 - header_bytes;
    for (const std::string& name : file.names()) {
      const SafetensorsEntry& entry = file.entry(name);
      MOE_FUZZ_ASSERT(entry.begin <= entry.end && entry.end <= data_size,
                      "tensor '{}' [{}, {}) outside a {}-byte data section", name, entry.begin, entry.end, data_size);
      const Tensor t = file.get(name);
      MOE_FUZZ_ASSERT(t.nbytes() == entry.end - entry.begin, "tensor '{}': {} bytes for a [{}, {}) entry", name,
                      t.nbytes(), entry.begin, entry.end);
      MOE_FUZZ_ASSERT(t.nbytes() == 0 || std::memcmp(t.data(), data_section + entry.begin, t.nbytes()) == 0,
                      "tensor '{}' does not hold the bytes of its data_offsets", name);
    }
  });
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_safetensors)
