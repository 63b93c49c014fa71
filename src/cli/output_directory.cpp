#include "output_directory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>

#include "moe/core/check.h"

namespace moe::cli {

namespace fs = std::filesystem;

namespace {

// True when `path` is `dir` or lies inside it (both canonical up to their existing parts).
bool within(const fs::path& path, const fs::path& dir) {
  auto [d, p] = std::mismatch(dir.begin(), dir.end(), path.begin(), path.end());
  return d == dir.end();
}

}  // namespace

OutputDirectory::OutputDirectory(const std::string& path, std::string option,
                                 std::span<const NamedPath> inputs)
    : option_(std::move(option)) {
  MOE_CHECK(!path.empty(), "{} is empty: name a new directory", option_);
  std::error_code error;
  target_ = fs::weakly_canonical(fs::absolute(path), error);
  MOE_CHECK(!error, "{} '{}': {}", option_, path, error.message());
  const bool exists = fs::exists(target_, error);
  MOE_CHECK(!exists || fs::is_directory(target_, error), "{} '{}' is a file: name a new directory", option_,
            path);
  MOE_CHECK(!exists || fs::is_empty(target_, error),
            "{} '{}' exists and is not empty: remove it or choose a new one", option_, path);
  MOE_CHECK(fs::is_directory(target_.parent_path(), error),
            "{} '{}': directory '{}' does not exist: create it first", option_, path,
            target_.parent_path().string());
  for (const NamedPath& input : inputs) {
    if (input.path.empty()) continue;
    const fs::path in = fs::weakly_canonical(fs::absolute(input.path), error);
    // NOTE: an existing directory that contains an input is not empty, so only the inside case is left.
    MOE_CHECK(!within(target_, in), "{} '{}' lies inside {} '{}': write it elsewhere", option_, path,
              input.option, input.path);
  }
  temp_ = target_.parent_path() / fmt::format(".{}.tmp-{}", target_.filename().string(), ::getpid());
  fs::remove_all(temp_, error);
  MOE_CHECK(fs::create_directory(temp_, error), "{} '{}': cannot create '{}': {}", option_, path,
            temp_.string(), error.message());
}

OutputDirectory::~OutputDirectory() {
  std::error_code ignored;
  if (!committed_) fs::remove_all(temp_, ignored);
}

void OutputDirectory::commit() {
  std::error_code error;
  // NOTE: rename(2) replaces an empty directory and refuses a non-empty one, so nothing written meanwhile
  // is lost.
  fs::rename(temp_, target_, error);
  MOE_CHECK(!error, "{} '{}': cannot rename '{}' onto it: {}", option_, target_.string(), temp_.string(),
            error.message());
  committed_ = true;
}

}  // namespace moe::cli
