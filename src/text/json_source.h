#pragma once
// The tokenizer.json being read: every error of its parts names the file, and the helpers that read one
// value.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace moe::text {

using Json = nlohmann::json;

struct JsonSource {
  std::string name;  // the file (or what the caller named the text), first in every message

  // Throws moe::Error "<name>: <what>".
  [[noreturn]] void fail(const std::string& what) const;
  // j[key]; an error naming `where` when j is not an object or has no `key`.
  const Json& need(const Json& j, const char* key, const std::string& where) const;
};

// An integer of JSON `v` in [lo, hi]; a float, a string or a value out of range is an error naming `what`.
int64_t json_int(const Json& v, int64_t lo, int64_t hi, const std::string& what);

}  // namespace moe::text
