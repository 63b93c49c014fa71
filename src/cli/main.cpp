// The `moe` command-line tool. Exit codes: 0 success, 2 bad input or usage (one line on stderr naming the
// problem), 1 an internal error.
#include <fmt/core.h>

#include <cstdlib>
#include <map>

#include "build_info.h"
#include "commands.h"
#include "error_report.h"
#include "moe/core/check.h"

int main(int argc, char** argv) {
  CLI::App app{"moe: a Mixture-of-Experts inference engine", "moe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", moe::cli::version_line(), "print the version and the build, then exit");
  // Options of the tool may follow the command's name: `moe generate --threads 8 ...`.
  app.fallthrough();
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads of the pool, the caller's included (default: the hardware "
                 "threads; the same setting as MOE_NUM_THREADS)")
      ->check(CLI::Range(1, 4096));
  std::map<std::string, moe::cli::Run> runs = {
      {"layer", moe::cli::add_layer_command(app)},
      {"demo", moe::cli::add_demo_command(app)},
      {"info", moe::cli::add_info_command(app)},
      {"bench", moe::cli::add_bench_command(app)},
      {"plan", moe::cli::add_plan_command(app)},
      {"tokenize", moe::cli::add_tokenize_command(app)},
      {"generate", moe::cli::add_generate_command(app)},
      {"quantize", moe::cli::add_quantize_command(app)},
      {"serve", moe::cli::add_serve_command(app)},
      {"stats", moe::cli::add_stats_command(app)},
  };
  // Every option's help shows its default.
  app.option_defaults()->always_capture_default();
  for (CLI::App* sub : app.get_subcommands({}))
    for (CLI::Option* option : sub->get_options())
      if (!option->get_required() && option->get_expected_min() > 0) option->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return moe::cli::report_error(fmt::format("{} (see moe --help)", e.what()), 2);
  }
  // NOTE: the pool reads its size once, at its first use, from the one parser of every MOE_* setting.
  if (threads > 0) setenv("MOE_NUM_THREADS", std::to_string(threads).c_str(), 1);
  try {
    for (CLI::App* sub : app.get_subcommands()) runs.at(sub->get_name())();
  } catch (const moe::Error& e) {
    return moe::cli::report_error(e.what(), 2);
  } catch (const std::exception& e) {
    return moe::cli::report_error(fmt::format("internal error: {}", e.what()), 1);
  }
  return 0;
}
