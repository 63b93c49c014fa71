#include "id_list.h"

#include <charconv>

#include "moe/core/check.h"

namespace moe::cli {

std::vector<int32_t> parse_id_list(const std::string& list, const std::string& option) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < list.size()) {
    while (pos < list.size() && (list[pos] == ' ' || list[pos] == ',')) ++pos;
    if (pos == list.size()) break;
    int32_t id = 0;
    const auto [end, ec] = std::from_chars(list.data() + pos, list.data() + list.size(), id);
    MOE_CHECK(ec == std::errc() && (end == list.data() + list.size() || *end == ',' || *end == ' '),
              "{} expects comma-separated token ids such as 1,2,3; cannot read '{}'", option, list.substr(pos));
    ids.push_back(id);
    pos = end - list.data();
  }
  return ids;
}

}  // namespace moe::cli
