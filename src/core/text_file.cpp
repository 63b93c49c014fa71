#include "core/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "moe/core/check.h"

namespace moe {

namespace fs = std::filesystem;

std::string read_text_file(const fs::path& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  MOE_CHECK(fs::exists(status), "{} '{}' does not exist: check the path", what, path.string());
  MOE_CHECK(!fs::is_directory(status), "{} '{}' is a directory: give the file itself", what, path.string());
  std::ifstream in(path, std::ios::binary);
  MOE_CHECK(in.is_open(), "cannot open the {} '{}': {}", what, path.string(), std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  MOE_CHECK(!in.bad(), "cannot read the {} '{}'", what, path.string());
  return text.str();
}

nlohmann::json read_json_file(const fs::path& path, const std::string& what) {
  const std::string text = read_text_file(path, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    MOE_FAIL("{} '{}' is not valid JSON: {}", what, path.string(), e.what());
  }
}

}  // namespace moe
