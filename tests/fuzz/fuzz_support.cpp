#include <unistd.h>

#include <fstream>
#include <system_error>

#include "fuzz_target.h"

namespace moe::fuzz {

void invariant_failed(const char* condition, const std::string& message) {
  std::fprintf(stderr, "fuzz invariant broken: %s: %s\n", condition, message.c_str());
  std::abort();
}

const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::error_code error;
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm", error) ? std::filesystem::path("/dev/shm")
                                                          : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("moe-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return d;
  }();
  return dir;
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) invariant_failed("write_file", "cannot write the scratch file " + path.string());
}

std::vector<std::string_view> split_parts(std::string_view input) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t hit = input.find(kPartSeparator, pos);
    if (hit == std::string_view::npos) {
      parts.push_back(input.substr(pos));
      return parts;
    }
    parts.push_back(input.substr(pos, hit - pos));
    pos = hit + kPartSeparator.size();
  }
}

}  // namespace moe::fuzz
