#pragma once
// Token id lists on the command line: "1,2, 3" -> {1, 2, 3}.

#include <cstdint>
#include <string>
#include <vector>

namespace moe::cli {

// Throws moe::Error naming `option` when `list` holds anything but comma- or space-separated integers.
std::vector<int32_t> parse_id_list(const std::string& list, const std::string& option);

}  // namespace moe::cli
