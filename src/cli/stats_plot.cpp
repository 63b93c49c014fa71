#include "stats_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "moe/core/check.h"

namespace moe::cli {

namespace {

using nlohmann::json;

// One heatmap row: a layer's pairs per expert.
struct LayerLoad {
  int layer;
  std::vector<int64_t> pairs;  // [n_experts]
};

// Per-rank loads of one layer (pairs served, or an epoch's before/after).
using RankLoads = std::map<int, std::vector<double>>;  // layer -> [n_ranks]

std::vector<int64_t> tokens_per_expert(const json& stats, const std::string& where) {
  MOE_CHECK(
      stats.is_object() && stats.contains("tokens_per_expert") && stats["tokens_per_expert"].is_array(),
      "{} has no tokens_per_expert list (write the file with moe generate --stats or moe layer --stats)",
      where);
  try {
    return stats["tokens_per_expert"].get<std::vector<int64_t>>();
  } catch (const json::exception&) {
    MOE_FAIL("{}: tokens_per_expert must be a list of integers", where);
  }
}

int layer_index(const std::string& key) {
  try {
    size_t used = 0;
    const int layer = std::stoi(key, &used);
    if (used == key.size() && layer >= 0) return layer;
  } catch (const std::exception&) {
  }
  MOE_FAIL("stats file: layer key '{}' is not a layer index (keys are decoder layer numbers)", key);
}

std::vector<LayerLoad> heatmap_rows(const json& stats) {
  MOE_CHECK(stats.is_object(), "stats file: expected a JSON object (moe generate --stats writes one)");
  std::vector<LayerLoad> rows;
  if (stats.contains("layers") && stats["layers"].is_object()) {
    for (const auto& [key, value] : stats["layers"].items())
      rows.push_back({layer_index(key), tokens_per_expert(value, fmt::format("stats file layer {}", key))});
  } else {
    rows.push_back({0, tokens_per_expert(stats, "stats file")});
  }
  MOE_CHECK(!rows.empty(), "stats file: no layers to plot");
  std::sort(rows.begin(), rows.end(),
            [](const LayerLoad& a, const LayerLoad& b) { return a.layer < b.layer; });
  for (const LayerLoad& r : rows)
    MOE_CHECK(r.pairs.size() == rows[0].pairs.size() && !r.pairs.empty(),
              "stats file: layer {} has {} experts, layer {} has {}", r.layer, r.pairs.size(), rows[0].layer,
              rows[0].pairs.size());
  return rows;
}

std::vector<double> numbers(const json& list, const std::string& where) {
  MOE_CHECK(list.is_array(), "stats file: {} must be a list of per-rank numbers", where);
  std::vector<double> out;
  for (const json& v : list) {
    MOE_CHECK(v.is_number(), "stats file: {} must be a list of per-rank numbers", where);
    out.push_back(v.get<double>());
  }
  return out;
}

RankLoads ep_rank_loads(const json& stats) {
  RankLoads loads;
  if (!stats.contains("ep")) return loads;
  const json& ep = stats["ep"];
  MOE_CHECK(ep.is_object() && ep.contains("layers") && ep["layers"].is_object(),
            "stats file: \"ep\" has no \"layers\" object (moe generate --ep --stats writes one)");
  for (const auto& [key, ranks] : ep["layers"].items()) {
    MOE_CHECK(ranks.is_array(), "stats file: ep layer {} must list its ranks", key);
    std::vector<double>& row = loads[layer_index(key)];
    for (const json& r : ranks) {
      MOE_CHECK(r.is_object() && r.contains("pairs_served") && r["pairs_served"].is_number(),
                "stats file: ep layer {}: every rank needs pairs_served", key);
      row.push_back(r["pairs_served"].get<double>());
    }
  }
  return loads;
}

struct Epoch {
  int epoch;
  RankLoads before, after;
};

// "epochs" at the top, or under "ep" (moe generate --ep --eplb-interval-steps --stats).
std::vector<Epoch> epochs_of(const json& stats) {
  std::vector<Epoch> epochs;
  const bool in_ep = stats.contains("ep") && stats["ep"].is_object() && stats["ep"].contains("epochs");
  if (!stats.contains("epochs") && !in_ep) return epochs;
  const json& list = in_ep ? stats["ep"]["epochs"] : stats["epochs"];
  MOE_CHECK(list.is_array(), "stats file: \"epochs\" must be a list of {{epoch, layers}} objects");
  for (const json& e : list) {
    MOE_CHECK(e.is_object() && e.contains("epoch") && e["epoch"].is_number_integer() &&
                  e.contains("layers") && e["layers"].is_object(),
              "stats file: every epoch needs an integer \"epoch\" and a \"layers\" object");
    Epoch epoch{.epoch = e["epoch"].get<int>(), .before = {}, .after = {}};
    for (const auto& [key, layer] : e["layers"].items()) {
      const std::string where = fmt::format("epoch {} layer {}", epoch.epoch, key);
      MOE_CHECK(layer.is_object() && layer.contains("before") && layer.contains("after"),
                "stats file: {} needs \"before\" and \"after\"", where);
      epoch.before[layer_index(key)] = numbers(layer["before"], where + " before");
      epoch.after[layer_index(key)] = numbers(layer["after"], where + " after");
    }
    epochs.push_back(std::move(epoch));
  }
  return epochs;
}

// Blue (cold) through white (the mean) to red (hot), over log2(load / mean) clamped to [-3, 3].
std::string heat_colour(double over_mean) {
  const double x = std::clamp(std::log2(std::max(over_mean, 1e-9)) / 3.0, -1.0, 1.0);
  const int fade = static_cast<int>(std::lround(255 * (1 - std::abs(x))));
  return x >= 0 ? fmt::format("rgb(255,{},{})", fade, fade) : fmt::format("rgb({},{},255)", fade, fade);
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

double max_over_mean(const std::vector<double>& loads) {
  double total = 0, top = 0;
  for (double l : loads) total += l, top = std::max(top, l);
  return total > 0 ? top / (total / static_cast<double>(loads.size())) : 1.0;
}

// Horizontal bars of per-rank load, one group per layer (each pair of series: one bar per rank and series).
// Returns the height drawn.
double rank_bars(std::string& svg, double top, const std::string& title,
                 const std::vector<std::pair<std::string, const RankLoads*>>& series) {
  const char* colours[] = {"#888888", "#2a7ab0"};
  double peak = 0;
  for (const auto& [name, loads] : series)
    for (const auto& [layer, ranks] : *loads)
      for (double l : ranks) peak = std::max(peak, l);
  double y = top;
  svg += fmt::format("<text x=\"10\" y=\"{:.0f}\" class=\"h\">{}</text>\n", y + 14, escape(title));
  y += 24;
  const double bar = 7, width = 600, x0 = 150;
  for (const auto& [layer, first] : *series[0].second) {
    std::string label = fmt::format("layer {}", layer);
    for (const auto& [name, loads] : series)
      if (loads->count(layer))
        label += fmt::format("  {}{:.2f}", name.empty() ? "max/mean " : name + " ",
                             max_over_mean(loads->at(layer)));
    svg += fmt::format("<text x=\"10\" y=\"{:.0f}\">{}</text>\n", y + 10, escape(label));
    y += 14;
    for (size_t r = 0; r < first.size(); ++r) {
      for (size_t s = 0; s < series.size(); ++s) {
        const auto it = series[s].second->find(layer);
        if (it == series[s].second->end() || r >= it->second.size()) continue;
        const double l = it->second[r], w = peak > 0 ? width * l / peak : 0;
        svg += fmt::format(
            "<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"{}\"><title>layer {} "
            "rank {}"
            "{}: {:.0f} pairs</title></rect>\n",
            x0, y, w, bar, colours[s % 2], layer, r, series[s].first.empty() ? "" : " " + series[s].first, l);
        y += bar;
      }
      svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" class=\"s\">rank {}</text>\n", x0 - 40, y - 1, r);
      y += 2;
    }
    y += 8;
  }
  return y - top;
}

}  // namespace

std::string stats_plot_svg(const json& stats) {
  const std::vector<LayerLoad> rows = heatmap_rows(stats);
  const RankLoads ep = ep_rank_loads(stats);
  const std::vector<Epoch> epochs = epochs_of(stats);
  const int E = static_cast<int>(rows[0].pairs.size()), L = static_cast<int>(rows.size());
  const double cw = std::clamp(1000.0 / E, 3.0, 18.0), ch = std::clamp(600.0 / L, 6.0, 18.0);
  const double x0 = 80, y0 = 60;

  std::string body;
  int dead = 0, hot = 0;
  for (int i = 0; i < L; ++i) {
    const LayerLoad& row = rows[i];
    int64_t total = 0;
    for (int64_t p : row.pairs) total += p;
    const double mean = static_cast<double>(total) / E;
    const double y = y0 + i * ch;
    body += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" class=\"s\" text-anchor=\"end\">layer {}</text>\n",
                        x0 - 4, y + ch - 1, row.layer);
    for (int e = 0; e < E; ++e) {
      const double x = x0 + e * cw, over = mean > 0 ? static_cast<double>(row.pairs[e]) / mean : 0.0;
      const bool is_dead = row.pairs[e] == 0, is_hot = mean > 0 && over >= kHotOverMean;
      dead += is_dead, hot += is_hot;
      const std::string tip =
          fmt::format("layer {} expert {}: {} pairs ({:.2f} x mean){}", row.layer, e, row.pairs[e], over,
                      is_dead  ? ", dead"
                      : is_hot ? ", hot"
                               : "");
      body += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\"{}><title>{}</title></rect>\n",
          x, y, cw, ch, is_dead ? "black" : heat_colour(over),
          is_hot ? " class=\"hot\" stroke=\"#600000\" stroke-width=\"1.5\"" : "", tip);
      if (is_dead)
        body += fmt::format(
            "<path class=\"dead\" d=\"M{:.1f} {:.1f}L{:.1f} {:.1f}M{:.1f} {:.1f}L{:.1f} {:.1f}\" "
            "stroke=\"white\" "
            "stroke-width=\"0.8\"/>\n",
            x, y, x + cw, y + ch, x + cw, y, x, y + ch);
    }
  }
  double y = y0 + L * ch + 20;
  body += fmt::format(
      "<text x=\"{:.0f}\" y=\"{:.0f}\">colour: pairs / layer mean, log scale (blue 1/8, white 1, red 8); "
      "black "
      "with a cross: dead ({}); outlined: hot, at least {:g} x mean ({})</text>\n",
      x0, y, dead, kHotOverMean, hot);
  y += 20;
  if (!ep.empty()) y += rank_bars(body, y, "pairs served per rank (expert parallelism)", {{"", &ep}});
  for (const Epoch& epoch : epochs)
    y += rank_bars(
        body, y,
        fmt::format("epoch {}: per-rank load before (grey) and after (blue) the switch", epoch.epoch),
        {{"before", &epoch.before}, {"after", &epoch.after}});

  const std::string title = fmt::format("expert load: {}{} layers x {} experts{}",
                                        stats.contains("model_type") && stats["model_type"].is_string()
                                            ? stats["model_type"].get<std::string>() + ", "
                                            : "",
                                        L, E,
                                        stats.contains("top_k") && stats["top_k"].is_number()
                                            ? fmt::format(", top-{}", stats["top_k"].get<int>())
                                            : "");
  const double width = std::max(x0 + E * cw + 20, 800.0), height = y + 10;
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} "
      "{:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<style>.h{{font-size:14px;font-weight:bold}} "
      ".s{{font-size:9px}}</style>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"24\" class=\"h\">{}</text>\n{}</svg>\n",
      width, height, width, height, escape(title), body);
}

}  // namespace moe::cli
