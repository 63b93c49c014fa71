#pragma once
// The host's memory as the kernel reports it.

#include <cstdint>

namespace moe {

// MemAvailable of /proc/meminfo in bytes (what can be allocated without swapping); 0 where it cannot be read.
int64_t host_available_memory();

}  // namespace moe
