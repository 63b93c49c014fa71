#pragma once
// Files a command writes. Every output path is checked before the work starts (so a bad one costs nothing
// and can never replace an input), each file is written under a temporary name beside its target and renamed
// onto it only once the whole command has succeeded, and a file that was not committed is removed: a failed
// run leaves nothing behind and an earlier file of the same name intact.

#include <filesystem>
#include <fstream>
#include <span>
#include <string>

namespace moe {

// A path given on the command line, with the option that gave it (for messages): {"--output", "y.safetensors"}.
struct NamedPath {
  std::string option;
  std::string path;  // empty: not given, skipped
};

// Throws moe::Error naming the option and the path when an output is a directory, its directory does not
// exist or cannot be written, it is the same file as an input (or another output), or it lies inside an input
// directory (a checkpoint). Inputs that do not exist are left to their readers.
void check_output_paths(std::span<const NamedPath> outputs, std::span<const NamedPath> inputs);

// One output file: write to temp_path() (or through stream()), then commit() renames it onto the target.
// Destroyed uncommitted, it removes the temporary file. A target that exists and is not a regular file (a
// terminal, /dev/null, a pipe) is written in place: there is nothing there to lose.
class OutputFile {
 public:
  // `what` names the file in messages, e.g. "--stats".
  OutputFile(const std::string& path, std::string what);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::filesystem::path& temp_path() const { return temp_; }
  // Opens temp_path() for writing on first use.
  std::ofstream& stream();
  // Closes the stream (if any), checks that everything was written and renames the file onto its target.
  void commit();

 private:
  std::filesystem::path target_, temp_;
  std::string what_;
  std::ofstream stream_;
  bool in_place_ = false, committed_ = false;
};

// Writes `text` to a new OutputFile and commits it.
void write_text_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace moe
