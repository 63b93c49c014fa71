#pragma once
// Reading the small text files a user names (config.json, a placement, tokenizer.json, an index): one place
// that turns a missing path, a directory where a file belongs, an unreadable file or malformed JSON into a
// moe::Error naming the path and what was expected.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace moe {

// The whole file. `what` names it in messages ("config file", "tokenizer file").
std::string read_text_file(const std::filesystem::path& path, const std::string& what);

// The file parsed as JSON; a parse error is "WHAT 'PATH' is not valid JSON: ...".
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& what);

}  // namespace moe
