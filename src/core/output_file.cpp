#include "core/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "moe/core/check.h"

namespace moe {

namespace fs = std::filesystem;

namespace {

// `inner` (canonical) is `outer` (canonical) or lies below it.
bool lies_inside(const fs::path& inner, const fs::path& outer) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}

void check_output(const NamedPath& out, std::span<const NamedPath> inputs) {
  const fs::path path = out.path;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  MOE_CHECK(!fs::is_directory(status), "{} '{}' is a directory: give the name of a file to write", out.option,
            out.path);
  const fs::path parent = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  MOE_CHECK(fs::is_directory(parent, ec), "{} '{}': the directory '{}' does not exist (create it first)",
            out.option, out.path, parent.string());
  const bool in_place = fs::exists(status) && !fs::is_regular_file(status);
  MOE_CHECK(::access(in_place ? path.c_str() : parent.c_str(), W_OK) == 0, "{} '{}': cannot write there: {}",
            out.option, out.path, std::strerror(errno));
  if (in_place) return;  // a device or a pipe: never an input file
  const fs::path target = fs::weakly_canonical(path, ec);
  for (const NamedPath& in : inputs) {
    if (in.path.empty() || !fs::exists(in.path, ec)) continue;
    const fs::path source = fs::canonical(in.path, ec);
    if (ec) continue;
    // NOTE: fs::equivalent compares st_dev and st_ino, so hard links and symbolic links are caught too.
    MOE_CHECK(!fs::exists(status) || !fs::equivalent(path, in.path, ec),
              "{} '{}' is the {} input: writing it would destroy it; give another file name", out.option, out.path,
              in.option);
    MOE_CHECK(!fs::is_directory(source, ec) || !lies_inside(target, source),
              "{} '{}' lies inside the {} directory '{}': give a file outside the inputs", out.option, out.path,
              in.option, in.path);
  }
}

}  // namespace

void check_output_paths(std::span<const NamedPath> outputs, std::span<const NamedPath> inputs) {
  std::error_code ec;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path.empty()) continue;
    check_output(outputs[i], inputs);
    for (size_t j = 0; j < i; ++j)
      MOE_CHECK(outputs[j].path.empty() ||
                    fs::weakly_canonical(outputs[i].path, ec) != fs::weakly_canonical(outputs[j].path, ec),
                "{} and {} name the same file '{}': give each output its own name", outputs[j].option,
                outputs[i].option, outputs[i].path);
  }
}

OutputFile::OutputFile(const std::string& path, std::string what) : what_(std::move(what)) {
  std::error_code ec;
  // A symbolic link is followed: the file it points at is replaced, the link kept.
  target_ = fs::weakly_canonical(path, ec);
  if (ec) target_ = path;
  const fs::file_status status = fs::status(target_, ec);
  in_place_ = fs::exists(status) && !fs::is_regular_file(status);
  temp_ = in_place_ ? target_
                    : target_.parent_path() / fmt::format(".{}.{}.partial", target_.filename().string(), ::getpid());
}

OutputFile::~OutputFile() {
  if (committed_ || in_place_) return;
  stream_.close();
  std::error_code ec;
  fs::remove(temp_, ec);
}

std::ofstream& OutputFile::stream() {
  if (!stream_.is_open()) {
    stream_.open(temp_, std::ios::binary | std::ios::trunc);
    MOE_CHECK(stream_.is_open(), "cannot write the {} file '{}': {}", what_, target_.string(), std::strerror(errno));
  }
  return stream_;
}

void OutputFile::commit() {
  if (stream_.is_open()) {
    stream_.close();
    MOE_CHECK(!stream_.fail(), "cannot write the {} file '{}' (disk full?)", what_, target_.string());
  }
  if (!in_place_) {
    std::error_code ec;
    fs::rename(temp_, target_, ec);
    MOE_CHECK(!ec, "cannot write the {} file '{}': {}", what_, target_.string(), ec.message());
  }
  committed_ = true;
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  OutputFile file(path, what);
  file.stream() << text;
  file.commit();
}

}  // namespace moe
