#pragma once
// Subcommands of the `moe` tool. Each registers its options on the CLI11 app and returns the function that
// runs it once the command line is parsed.

#include <CLI/CLI.hpp>

#include <functional>

namespace moe::cli {

using Run = std::function<void()>;

Run add_layer_command(CLI::App& app);
Run add_demo_command(CLI::App& app);
Run add_info_command(CLI::App& app);
Run add_bench_command(CLI::App& app);
Run add_plan_command(CLI::App& app);
Run add_tokenize_command(CLI::App& app);
Run add_generate_command(CLI::App& app);
Run add_quantize_command(CLI::App& app);
Run add_serve_command(CLI::App& app);
Run add_stats_command(CLI::App& app);

}  // namespace moe::cli
