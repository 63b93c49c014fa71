#pragma once
// Runs a shell command for end-to-end tests: its exit code and what it wrote to stderr (stdout dropped).

#include <filesystem>
#include <string>

namespace moe::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string err;
};

// `scratch` holds the captured stderr file.
CommandResult run_command(const std::filesystem::path& scratch, const std::string& command);

}  // namespace moe::test
