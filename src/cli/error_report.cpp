#include "error_report.h"

#include <fmt/core.h>

#include <chrono>
#include <thread>

#include "ep/launcher.h"

namespace moe::cli {

namespace {

// The length of the valid UTF-8 sequence starting at text[i], or 0 when it is not one.
size_t utf8_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  uint32_t min = 0;
  if (lead >= 0xC2 && lead <= 0xDF) n = 2, min = 0x80;
  else if (lead >= 0xE0 && lead <= 0xEF) n = 3, min = 0x800;
  else if (lead >= 0xF0 && lead <= 0xF4) n = 4, min = 0x10000;
  else return 0;
  if (i + n > text.size()) return 0;
  uint32_t code = lead & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  const bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  return code >= min && code <= 0x10FFFF && !surrogate ? n : 0;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      if (const size_t n = utf8_length(text, i); n > 0) {
        out.append(text.substr(i, n));
        i += n;
        continue;
      }
    }
    if ((c < 0x20 && c != '\t') || c == 0x7F || c >= 0x80) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
    ++i;
  }
  return out;
}

int report_error(const std::string& message, int exit_code) {
  // NOTE: bad input fails on every rank alike; waiting lets mpirun end this rank when rank 0 fails too.
  if (ep::launcher_rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  fmt::print(stderr, "error: {}\n", printable(message));
  return exit_code;
}

}  // namespace moe::cli
