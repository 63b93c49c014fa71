#include "progress_line.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace moe::cli {

ProgressLine::ProgressLine(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO) == 1) {}

void ProgressLine::show(const std::string& line) {
  if (!enabled_) return;
  fmt::print(stderr, "\r\033[K{}", line);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::show_bar(const std::string& label, int64_t done, int64_t total, const std::string& unit) {
  constexpr int64_t kWidth = 30;
  const int64_t filled = total > 0 ? std::clamp<int64_t>(done * kWidth / total, 0, kWidth) : 0;
  show(fmt::format("{} [{}{}] {}/{} {}", label, std::string(filled, '#'), std::string(kWidth - filled, '.'), done,
                   total, unit));
}

void ProgressLine::clear() {
  if (!shown_) return;
  fmt::print(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace moe::cli
