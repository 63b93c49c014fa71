#include "json_source.h"

#include <fmt/format.h>

#include "moe/core/check.h"

namespace moe::text {

void JsonSource::fail(const std::string& what) const {
  MOE_FAIL("{}: {}", name, what);
}

const Json& JsonSource::need(const Json& j, const char* key, const std::string& where) const {
  if (!j.is_object() || !j.contains(key)) fail(fmt::format("{} has no \"{}\"", where, key));
  return j.at(key);
}

int64_t json_int(const Json& v, int64_t lo, int64_t hi, const std::string& what) {
  MOE_CHECK(v.is_number_integer(), "{} must be an integer, got {}", what, v.dump());
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                               : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  MOE_CHECK(in_range, "{} is {}, outside [{}, {}]", what, v.dump(), lo, hi);
  return v.get<int64_t>();
}

}  // namespace moe::text
