#pragma once
// `moe stats plot`: a load-statistics JSON file drawn as an SVG picture (our own writer, no library).
//   heatmap  layers x experts, each cell the expert's pairs over the layer's mean (log scale, blue below,
//            red above); dead experts (no pairs) black with a cross, hot ones (>= kHotOverMean x mean)
//            outlined
//   ranks    under EP ("ep" in the file, from `moe generate --ep --stats`): pairs served per rank per layer
//   epochs   when the file has "epochs", at the top or under "ep" ([{"epoch": E, "layers": {"N":
//            {"before": [per rank], "after": [per rank]}}}]): each layer's per-rank load before and after
//            the epoch's switch
// Accepted files: `moe generate --stats` ("layers": {"N": LoadStats}) and a single LoadStats
// ("tokens_per_expert" at the top: one layer, as `moe layer --stats` writes).

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace moe::cli {

inline constexpr double kHotOverMean = 2.0;

// The SVG document of `stats`. Throws moe::Error naming what the file lacks.
std::string stats_plot_svg(const nlohmann::json& stats);

}  // namespace moe::cli
