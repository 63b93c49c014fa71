#pragma once
// safetensors files: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
// then the data section. The reader memory-maps the file and hands out zero-copy, read-only views; it
// validates everything before any tensor is used and names what is wrong in a corrupt file.

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "moe/core/tensor.h"

namespace moe {

struct SafetensorsEntry {
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;  // byte offsets into the data section
  uint64_t end;
};

class SafetensorsFile {
 public:
  // Maps `path` and checks the header: length within the file, valid JSON object, known dtypes, shapes of
  // non-negative extents, end - begin == numel * dtype size, offsets inside the data section, no two
  // tensors overlapping. Throws moe::Error naming the file and the problem.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  const SafetensorsEntry& entry(const std::string& name) const;
  // A read-only view into the mapping (kept alive by the returned tensor); a tensor whose offset is not a
  // multiple of its dtype's size comes as an aligned copy instead. Throws for a missing name.
  Tensor get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::filesystem::path path_;
  std::shared_ptr<const void> mapping_;  // the whole file
  const char* data_section_ = nullptr;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any device-host dtype, any strides: written contiguous) with 8-byte aligned header
// padding and the data in descending dtype size, then name order (every tensor aligned to its element
// size), as the reference implementation does. Throws on duplicate names or I/O errors.
// Drops this process's resident pages of `t` when it is a view of a mapped safetensors file (whole pages
// inside it only; a later read faults them in from the file again): a caller that has copied the weights
// elsewhere (the fast CPU experts' repacked copy) does not keep both resident. Other memory is left alone.
void release_mapped_pages(const Tensor& t);

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace moe
