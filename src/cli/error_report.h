#pragma once
// How the `moe` command reports an error: one line on stderr, printable whatever bytes a corrupt file put in
// the message, and once per job under a launcher (mpirun) rather than once per rank.

#include <string>
#include <string_view>

namespace moe::cli {

// `text` with invalid UTF-8 and control bytes (other than tab) written as \xNN: safe on any terminal.
std::string printable(std::string_view text);

// Prints "error: MESSAGE" (escaped) and returns `exit_code`. Rank 0 of a launched job prints at once; another
// rank prints only if the job is still running a moment later, that is, if rank 0 did not fail too (mpirun
// ends the job when the first process fails).
int report_error(const std::string& message, int exit_code);

}  // namespace moe::cli
