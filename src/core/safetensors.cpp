#include "moe/core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

namespace moe {

namespace {

using json = nlohmann::json;

// NOTE: the reference implementation refuses headers above 100 MB too; a real header is a few MB at most.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kHeaderAlign = 8;
constexpr const char* kSupportedDTypes = "F32 BF16 F16 F8_E4M3 I8 U8 I32 I64";

// The live mappings [begin, end), so that release_mapped_pages touches file-backed memory only (on an
// anonymous allocation MADV_DONTNEED would zero the data).
std::mutex g_mappings_mutex;
std::map<uintptr_t, uintptr_t> g_mappings;  // begin -> end

// The whole file, read-only; the returned owner unmaps it.
std::shared_ptr<const void> map_file(const std::filesystem::path& path, size_t& size) {
  // NOTE: O_NONBLOCK so that a FIFO named as a checkpoint fails the regular-file check below instead of
  // blocking the open (it does not affect reads of a regular file).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MOE_CHECK(fd >= 0, "cannot open safetensors file '{}': {}", path.string(), std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    MOE_FAIL("cannot stat safetensors file '{}': {}", path.string(), std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    MOE_FAIL("'{}' is not a regular file: expected a .safetensors file", path.string());
  }
  size = static_cast<size_t>(info.st_size);
  if (size < 8) {
    ::close(fd);
    MOE_FAIL("'{}' is {} bytes long, shorter than 8 bytes (the header length field): not a safetensors file",
             path.string(), size);
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the file open
  MOE_CHECK(base != MAP_FAILED, "cannot map safetensors file '{}' ({} bytes): {}", path.string(), size,
            std::strerror(error));
  {
    std::lock_guard lock(g_mappings_mutex);
    g_mappings[reinterpret_cast<uintptr_t>(base)] = reinterpret_cast<uintptr_t>(base) + size;
  }
  return std::shared_ptr<const void>(base, [size](const void* p) {
    {
      std::lock_guard lock(g_mappings_mutex);
      g_mappings.erase(reinterpret_cast<uintptr_t>(p));
    }
    ::munmap(const_cast<void*>(p), size);
  });
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

SafetensorsEntry parse_entry(const std::string& file, const std::string& name, const json& value,
                             uint64_t data_size) {
  MOE_CHECK(value.is_object(), "'{}': entry '{}' is a JSON {}, expected an object with dtype, shape and data_offsets",
            file, name, value.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    MOE_CHECK(value.contains(key), "'{}': tensor '{}' lacks \"{}\"", file, name, key);

  const json& dtype_json = value["dtype"];
  MOE_CHECK(dtype_json.is_string(), "'{}': tensor '{}' has dtype {}, expected a string (supported: {})", file, name,
            dtype_json.dump(), kSupportedDTypes);
  const std::string dtype_spelling = dtype_json.get<std::string>();
  const std::optional<DType> dtype = dtype_from_name(dtype_spelling);
  MOE_CHECK(dtype.has_value(), "'{}': tensor '{}' has unsupported dtype '{}' (supported: {})", file, name,
            dtype_spelling, kSupportedDTypes);

  const json& shape_json = value["shape"];
  MOE_CHECK(shape_json.is_array(), "'{}': tensor '{}' has shape {}, expected an array of non-negative integers", file,
            name, shape_json.dump());
  std::vector<int64_t> shape;
  shape.reserve(shape_json.size());
  for (const json& extent : shape_json) {
    const bool ok = extent.is_number_unsigned() &&
                    extent.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    MOE_CHECK(ok, "'{}': tensor '{}' has shape {}: extents must be non-negative integers", file, name,
              shape_json.dump());
    shape.push_back(extent.get<int64_t>());
  }

  const json& offsets = value["data_offsets"];
  const bool offsets_ok = offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                          offsets[1].is_number_unsigned() && offsets[0].get<uint64_t>() <= offsets[1].get<uint64_t>();
  MOE_CHECK(offsets_ok,
            "'{}': tensor '{}' has data_offsets {}, expected two non-decreasing non-negative integers [begin, end]",
            file, name, offsets.dump());
  const SafetensorsEntry entry{.dtype = *dtype,
                               .shape = std::move(shape),
                               .begin = offsets[0].get<uint64_t>(),
                               .end = offsets[1].get<uint64_t>()};

  int64_t nbytes = 0;
  try {
    int64_t numel = 1;
    for (int64_t extent : entry.shape) numel = checked_mul(numel, extent, "element count");
    nbytes = checked_mul(numel, static_cast<int64_t>(dtype_size(entry.dtype)), "byte size");
  } catch (const Error& e) {
    MOE_FAIL("'{}': tensor '{}' of shape {}: {}", file, name, shape_to_string(entry.shape), e.what());
  }
  MOE_CHECK(entry.end - entry.begin == static_cast<uint64_t>(nbytes),
            "'{}': tensor '{}' of {} {} needs {} bytes but its data_offsets [{}, {}] span {} bytes", file, name,
            dtype_spelling, shape_to_string(entry.shape), nbytes, entry.begin, entry.end, entry.end - entry.begin);
  MOE_CHECK(entry.end <= data_size,
            "'{}': tensor '{}' ends at byte {} of the data section, which has only {} bytes: the file is truncated",
            file, name, entry.end, data_size);
  return entry;
}

std::map<std::string, std::string> parse_metadata(const std::string& file, const json& value) {
  MOE_CHECK(value.is_object(), "'{}': __metadata__ is a JSON {}, expected an object of string to string", file,
            value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    MOE_CHECK(item.is_string(), "'{}': __metadata__ entry '{}' is {}, expected a string (an object of string to string)",
              file, key, item.dump());
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// No two tensors may share a byte (empty tensors take no bytes and never overlap).
void check_no_overlap(const std::string& file, const std::map<std::string, SafetensorsEntry>& entries) {
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> by_offset;
  by_offset.reserve(entries.size());
  for (const auto& [name, entry] : entries)
    if (entry.end > entry.begin) by_offset.emplace_back(&name, &entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto& [prev_name, prev] = by_offset[i - 1];
    const auto& [name, entry] = by_offset[i];
    MOE_CHECK(entry->begin >= prev->end, "'{}': tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section",
              file, *prev_name, prev->begin, prev->end, *name, entry->begin, entry->end);
  }
}

// Writes `bytes` to a fresh file, then renames it over `path`, so that a reader never sees half a file and
// mappings of the old file stay valid.
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& path)
      : path_(path), temp_(path.string() + fmt::format(".tmp{}.{}", ::getpid(), counter_++)) {
    file_ = std::fopen(temp_.c_str(), "wb");
    MOE_CHECK(file_ != nullptr, "cannot create '{}' (as '{}'): {}", path_.string(), temp_.string(),
              std::strerror(errno));
  }
  ~AtomicFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) {
      std::error_code ignored;
      std::filesystem::remove(temp_, ignored);
    }
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n) {
    if (n == 0) return;
    MOE_CHECK(std::fwrite(data, 1, n, file_) == n, "cannot write {} bytes to '{}' (as '{}'): {}", n, path_.string(),
              temp_.string(), std::strerror(errno));
  }
  void commit() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    MOE_CHECK(rc == 0, "cannot write '{}' (as '{}'): {}", path_.string(), temp_.string(), std::strerror(errno));
    std::error_code error;
    std::filesystem::rename(temp_, path_, error);
    MOE_CHECK(!error, "cannot rename '{}' to '{}': {}", temp_.string(), path_.string(), error.message());
    committed_ = true;
  }

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
  static inline std::atomic<uint64_t> counter_{0};  // distinct temp names for writers in one process
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  const std::string name = path.string();
  size_t size = 0;
  file.mapping_ = map_file(path, size);
  const auto* bytes = static_cast<const unsigned char*>(file.mapping_.get());

  const uint64_t header_bytes = read_le64(bytes);
  MOE_CHECK(header_bytes <= size - 8,
            "'{}': header length {} is larger than the file ({} bytes): truncated or not a safetensors file", name,
            header_bytes, size);
  MOE_CHECK(header_bytes <= kMaxHeaderBytes, "'{}': header length {} exceeds the {}-byte limit: not a safetensors file",
            name, header_bytes, kMaxHeaderBytes);
  const char* header_begin = reinterpret_cast<const char*>(bytes) + 8;
  file.data_section_ = header_begin + header_bytes;
  const uint64_t data_size = size - 8 - header_bytes;

  // NOTE: nlohmann's lexer ends the input at a NUL byte, which would silently ignore the rest of the header.
  const void* nul = std::memchr(header_begin, '\0', header_bytes);
  MOE_CHECK(nul == nullptr, "'{}': header is not valid JSON (NUL byte at offset {})", name,
            static_cast<const char*>(nul) - header_begin);
  json header;
  try {
    header = json::parse(header_begin, file.data_section_);
  } catch (const json::exception& e) {
    MOE_FAIL("'{}': header is not valid JSON ({})", name, e.what());
  }
  MOE_CHECK(header.is_object(), "'{}': header is a JSON {}, expected an object", name, header.type_name());

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      file.metadata_ = parse_metadata(name, value);
    } else {
      file.entries_.emplace(key, parse_entry(name, key, value, data_size));
    }
  }
  check_no_overlap(name, file.entries_);
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  MOE_CHECK(it != entries_.end(), "tensor '{}' not found in {}", name, path_.string());
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const char* data = data_section_ + e.begin;
  // NOTE: the format does not align tensors (offsets are contiguous; a BF16 tensor of odd size leaves the next
  // F32 one at 2 mod 4), and reading a float through a misaligned pointer is undefined behaviour (UBSan
  // reports it): such a tensor is copied into aligned memory. Files written in descending dtype size, as the
  // reference writer does, are always aligned and stay zero-copy.
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(e.dtype) != 0) {
    Tensor copy = Tensor::empty(e.dtype, e.shape);
    std::memcpy(copy.data(), data, copy.nbytes());
    return copy;
  }
  // NOTE: the mapping is PROT_READ; the const_cast only fits Tensor's pointer type, writes would fault.
  return Tensor::view(const_cast<char*>(data), e.dtype, e.shape, mapping_);
}

void release_mapped_pages(const Tensor& t) {
  if (!t.defined() || t.device() != Device::cpu || !t.is_contiguous()) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data()), end = begin + t.nbytes();
  {
    std::lock_guard lock(g_mappings_mutex);
    auto it = g_mappings.upper_bound(begin);
    if (it == g_mappings.begin()) return;
    --it;
    if (end > it->second) return;  // not inside one mapping
  }
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::map<std::string, Tensor> sorted;  // name order, contiguous
  for (const auto& [name, tensor] : tensors) {
    MOE_CHECK(name != "__metadata__", "cannot write '{}': '__metadata__' is reserved and cannot name a tensor",
              path.string());
    MOE_CHECK(tensor.defined(), "cannot write '{}': tensor '{}' is undefined", path.string(), name);
    MOE_CHECK(tensor.device() == Device::cpu, "cannot write '{}': tensor '{}' is not on the host", path.string(), name);
    const bool inserted = sorted.emplace(name, tensor.is_contiguous() ? tensor : tensor.to(tensor.dtype())).second;
    MOE_CHECK(inserted, "cannot write '{}': duplicate tensor name '{}'", path.string(), name);
  }

  // NOTE: data in descending dtype size, then name order (as the reference writer lays it out), so that every
  // tensor starts at a multiple of its element size and reads back as a zero-copy view.
  std::vector<std::pair<std::string, Tensor>> layout(sorted.begin(), sorted.end());
  std::stable_sort(layout.begin(), layout.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second.dtype()) > dtype_size(b.second.dtype());
  });
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, tensor] : layout) {
    const uint64_t end = offset + tensor.nbytes();
    header[name] = {{"dtype", std::string(dtype_name(tensor.dtype()))},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    MOE_FAIL("cannot write '{}': a tensor name or metadata string is not valid UTF-8 ({})", path.string(), e.what());
  }
  text.resize((text.size() + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign, ' ');

  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));
  AtomicFile out(path);
  out.write(length, sizeof(length));
  out.write(text.data(), text.size());
  for (const auto& [name, tensor] : layout) out.write(tensor.data(), tensor.nbytes());
  out.commit();
}

}  // namespace moe
