#pragma once
// Progress on a terminal only, rewritten in place on stderr: in a pipe or a log stderr stays one line per
// error, so scripts and tests that read it see no progress at all.

#include <cstdint>
#include <string>

namespace moe::cli {

class ProgressLine {
 public:
  // enabled: this process may show progress (under expert parallelism only rank 0 does); it shows it only
  // where stderr is a terminal.
  explicit ProgressLine(bool enabled);
  ~ProgressLine() { clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void show(const std::string& line);
  // "LABEL [#####.....] DONE/TOTAL UNIT" with a bar of the done share.
  void show_bar(const std::string& label, int64_t done, int64_t total, const std::string& unit);
  void clear();

 private:
  bool enabled_;
  bool shown_ = false;
};

}  // namespace moe::cli
