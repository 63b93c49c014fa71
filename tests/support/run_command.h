#pragma once
// Runs a shell command for end-to-end tests: its exit code and what it wrote to stderr (stdout dropped); the
// quoting and file reading those tests share.

#include <filesystem>
#include <string>

namespace moe::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string err;
};

// `scratch` holds the captured stderr file.
CommandResult run_command(const std::filesystem::path& scratch, const std::string& command);

// `s` as one word of a POSIX shell command line (single-quoted).
std::string shell_quote(const std::string& s);

// The bytes of the file at `path` (empty when it cannot be read: a test then fails on what it expected).
std::string read_file(const std::filesystem::path& path);

}  // namespace moe::test
