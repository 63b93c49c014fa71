// The `moe` command-line tool. Exit codes: 0 success, 2 bad input or usage (one line on stderr naming the
// problem), 1 an internal error.
#include <fmt/core.h>

#include <map>

#include "commands.h"
#include "moe/core/check.h"

int main(int argc, char** argv) {
  CLI::App app{"moe: a Mixture-of-Experts inference engine", "moe"};
  app.require_subcommand(1);
  std::map<std::string, moe::cli::Run> runs = {
      {"layer", moe::cli::add_layer_command(app)},
      {"demo", moe::cli::add_demo_command(app)},
      {"info", moe::cli::add_info_command(app)},
      {"bench", moe::cli::add_bench_command(app)},
      {"plan", moe::cli::add_plan_command(app)},
      {"tokenize", moe::cli::add_tokenize_command(app)},
      {"generate", moe::cli::add_generate_command(app)},
      {"serve", moe::cli::add_serve_command(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fmt::print(stderr, "error: {} (see moe --help)\n", e.what());
    return 2;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) runs.at(sub->get_name())();
  } catch (const moe::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: internal error: {}\n", e.what());
    return 1;
  }
  return 0;
}
