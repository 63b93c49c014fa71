#include "run_command.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace moe::test {

CommandResult run_command(const std::filesystem::path& scratch, const std::string& command) {
  const std::string err_file = (scratch / "stderr.txt").string();
  const int status = std::system((command + " >/dev/null 2>" + err_file).c_str());
  std::ifstream in(err_file);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace moe::test
