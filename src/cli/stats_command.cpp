// `moe stats plot STATS.json --out FILE.svg`: the expert-load picture of a load-statistics file
// (stats_plot.h), written through the safe output file.
#include <filesystem>
#include <memory>

#include "commands.h"
#include "core/output_file.h"
#include "core/text_file.h"
#include "moe/core/check.h"
#include "stats_plot.h"

namespace moe::cli {

namespace {

struct PlotOptions {
  std::string stats;
  std::string out;
};

void run_plot(const PlotOptions& o) {
  const std::string ext = std::filesystem::path(o.out).extension().string();
  MOE_CHECK(
      ext != ".png",
      "--out {}: moe stats plot writes SVG only (no image library here); give a .svg path and convert it if "
      "needed (rsvg-convert FILE.svg -o FILE.png)",
      o.out);
  MOE_CHECK(ext == ".svg", "--out {}: the picture is an SVG file: give a path ending in .svg", o.out);
  const NamedPath outputs[] = {{"--out", o.out}};
  const NamedPath inputs[] = {{"STATS.json", o.stats}};
  check_output_paths(outputs, inputs);
  const std::string svg = stats_plot_svg(read_json_file(o.stats, "stats file"));
  write_text_file(o.out, svg, "--out");
}

}  // namespace

Run add_stats_command(CLI::App& app) {
  auto options = std::make_shared<PlotOptions>();
  CLI::App* sub = app.add_subcommand("stats", "Look at expert-load statistics files");
  sub->require_subcommand(1);
  CLI::App* plot = sub->add_subcommand(
      "plot",
      "Draw a --stats file as SVG: the layers x experts load heatmap (dead and hot experts marked) and, "
      "under expert parallelism, per-rank load per layer (before and after each epoch when it has epochs)");
  plot->add_option("STATS.json", options->stats,
                   "A load-statistics file (moe generate --stats, moe layer --stats)")
      ->required();
  plot->add_option("--out", options->out, "The picture to write (.svg)")->required();
  return [options] { run_plot(*options); };
}

}  // namespace moe::cli
