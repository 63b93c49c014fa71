#include "layering.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>

namespace moe::layering {
namespace fs = std::filesystem;
namespace {

// Who may include whom, bottom to top (shared/DESIGN.md); a layer may always include itself. cpu/ and cuda/
// are backends: ops only, neither includes the other (today's code: cuda/ uses no cpu/ header). model/
// reaches the GPU only through layer/, never cuda/ itself. bench/ may include any layer, cli/ bench/ too.
const std::map<std::string, std::set<std::string>>& may_include() {
  static const std::map<std::string, std::set<std::string>> table = [] {
    std::map<std::string, std::set<std::string>> t = {
        {"core", {}},
        {"routing", {"core"}},
        {"quant", {"core"}},
        {"cpu", {"core", "routing", "quant"}},
        {"cuda", {"core", "routing", "quant"}},
        {"layer", {"core", "routing", "quant", "cpu", "cuda"}},
        {"ep", {"core", "routing", "quant", "cpu", "cuda", "layer"}},
        {"text", {"core"}},
        {"model", {"core", "routing", "quant", "cpu", "layer", "text"}},
        {"engine", {"core", "routing", "quant", "cpu", "cuda", "layer", "ep", "text", "model"}},
        {"server", {"core", "engine", "text"}},
    };
    // include/moe/*.h: the public facade's umbrella headers, over the public headers of every layer.
    std::set<std::string> below_facade;
    for (const auto& [layer, below] : t) below_facade.insert(layer);
    t["facade"] = below_facade;
    std::set<std::string> all;
    for (const auto& [layer, below] : t) all.insert(layer);
    t["bench"] = all;
    all.insert("bench");  // the `moe bench` command runs bench/'s code
    t["cli"] = all;
    return t;
  }();
  return table;
}

bool is_layer(const std::string& name) {
  return may_include().contains(name);
}

// Only ep/ knows about ranks: MPI and NCCL headers nowhere else.
bool is_mpi_or_nccl(const std::string& header) {
  static const std::regex pattern(
      R"(^((mpi|mpio|mpi-ext|mpicxx|nccl|nccl_net|nccl_tuner)\.h|(mpi|nccl|openmpi)/.*)$)");
  return std::regex_match(header, pattern);
}

// The CUDA toolkit's headers, allowed where cuda/ is.
bool is_cuda_toolkit(const std::string& header) {
  static const std::regex pattern(
      R"(^((cuda|cublas|curand|cusparse|cufft|cusolver|nvrtc|nvtx|nvToolsExt|cooperative_groups)[^/]*|(cub|thrust|cute|cutlass|cuda|nvtx3)/.*)$)");
  return std::regex_match(header, pattern);
}

// The layer of a path relative to the root: src/<layer>/..., include/moe/<layer>/..., include/moe/<umbrella>.h
// (the facade) or bench/...
std::optional<std::string> layer_of(const fs::path& relative) {
  std::vector<std::string> parts;
  for (const auto& part : relative) parts.push_back(part.string());
  if (parts.size() >= 3 && parts[0] == "src") return parts[1];
  if (parts.size() >= 4 && parts[0] == "include" && parts[1] == "moe") return parts[2];
  if (parts.size() == 3 && parts[0] == "include" && parts[1] == "moe") return "facade";
  if (parts.size() >= 2 && parts[0] == "bench") return "bench";
  return std::nullopt;
}

bool is_source(const fs::path& path) {
  static const std::set<std::string> extensions = {".h", ".hpp", ".cuh", ".inc", ".c", ".cc", ".cpp", ".cu"};
  return extensions.contains(path.extension().string());
}

// What is wrong with `header` (as written: quoted or angled) included from `file` of `layer`; nothing when
// fine.
std::optional<std::string> judge(const fs::path& root, const fs::path& file, const std::string& layer,
                                 const std::string& header, bool angled) {
  const std::string shown = angled ? "<" + header + ">" : header;
  std::optional<std::string> target;
  if (header.starts_with("moe/")) {
    target = layer_of(fs::path("include") / header);
    if (!target) return fmt::format("includes {} (not of the form moe/<layer>/...)", shown);
  } else if (angled) {
    if (is_mpi_or_nccl(header) && layer != "ep")
      return fmt::format("includes {} (only ep/ may include MPI or NCCL headers)", shown);
    if (is_cuda_toolkit(header) && layer != "cuda" && !may_include().at(layer).contains("cuda"))
      return fmt::format("includes {} ({}/ may not include CUDA headers, as it may not include cuda/)", shown,
                         layer);
    return std::nullopt;
  } else {
    // A private header: beside the includer, src/<layer>/... (src/ is on every in-tree target's path) or
    // bench/... (bench/ holds its own headers).
    fs::path resolved = (file.parent_path() / header).lexically_normal();
    if (!fs::is_regular_file(root / resolved)) resolved = (fs::path("src") / header).lexically_normal();
    if (!fs::is_regular_file(root / resolved) && header.starts_with("bench/")) resolved = fs::path(header);
    if (!fs::is_regular_file(root / resolved))
      return fmt::format("includes {} (neither moe/<layer>/..., <layer>/... under src/ nor a file beside it)",
                         shown);
    target = layer_of(resolved);
    if (!target)
      return fmt::format("includes {} (resolves to {}, outside the layers)", shown, resolved.string());
    // NOTE: include/ is what an application sees: a public header that reached into src/ would not compile
    // outside this tree.
    if (*file.begin() == "include" && *resolved.begin() == "src")
      return fmt::format("includes {} (a public header may include only public ones: {} is private)", shown,
                         resolved.string());
  }
  if (!is_layer(*target)) return fmt::format("includes {} ({}/ is not a layer)", shown, *target);
  if (*target != layer && !may_include().at(layer).contains(*target))
    return fmt::format("includes {} ({}/ may not include {}/)", shown, layer, *target);
  return std::nullopt;
}

}  // namespace

std::string Violation::message() const {
  return line > 0 ? fmt::format("{}:{} {}", file, line, what) : fmt::format("{} {}", file, what);
}

Report check_tree(const fs::path& root) {
  std::vector<fs::path> files;  // relative to root
  for (const char* top : {"src", "include/moe", "bench"}) {
    if (!fs::is_directory(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top))
      if (entry.is_regular_file() && is_source(entry.path()))
        files.push_back(entry.path().lexically_relative(root));
  }
  std::sort(files.begin(), files.end());

  static const std::regex include_line(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  Report report;
  for (const fs::path& file : files) {
    ++report.files;
    const std::optional<std::string> layer = layer_of(file);
    if (!layer || !is_layer(*layer)) {
      report.violations.push_back(
          {file.string(), 0,
           fmt::format("is in no layer (a layer is src/<layer>/, include/moe/<layer>/ or "
                       "bench/; the layers are listed in tests/layering/layering.cpp)")});
      continue;
    }
    std::ifstream in(root / file);
    std::string text;
    std::smatch match;
    for (int line = 1; std::getline(in, text); ++line) {
      if (!std::regex_search(text, match, include_line)) continue;
      ++report.includes;
      if (auto what = judge(root, file, *layer, match[2].str(), match[1].str() == "<"))
        report.violations.push_back({file.string(), line, std::move(*what)});
    }
  }
  return report;
}

}  // namespace moe::layering
