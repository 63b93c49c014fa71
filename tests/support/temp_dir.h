#pragma once
// A fresh directory under the system temp dir for one test, removed with everything in it at scope exit —
// unless the test failed, when it is kept and its path printed, so the files can be looked at.

#include <filesystem>
#include <string>

namespace moe::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace moe::test
