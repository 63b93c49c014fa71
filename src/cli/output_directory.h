#pragma once
// A directory a command writes (a checkpoint), with the guarantees output files have (core/output_file.h):
// checked before the work starts, written under a temporary name beside its target and renamed onto it
// only once complete, and removed when the command fails, so that a failed run leaves nothing behind.

#include <filesystem>
#include <span>
#include <string>

#include "core/output_file.h"

namespace moe::cli {

class OutputDirectory {
 public:
  // Throws moe::Error naming `option` and `path` when the path is a file, exists and is not empty, has no
  // parent directory, or lies inside one of `inputs` (a checkpoint directory).
  OutputDirectory(const std::string& path, std::string option, std::span<const NamedPath> inputs);
  ~OutputDirectory();
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;

  // Where to write: a new, empty directory beside the target.
  const std::filesystem::path& temp_path() const { return temp_; }
  // Renames temp_path() onto the target (which must still be absent or empty).
  void commit();

 private:
  std::filesystem::path target_, temp_;
  std::string option_;
  bool committed_ = false;
};

}  // namespace moe::cli
