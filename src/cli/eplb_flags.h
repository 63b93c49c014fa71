#pragma once
// The elastic placement's four flags (--eplb-interval-steps, --eplb-window-steps, --num-redundant-experts,
// --eplb-min-gain), shared by `moe generate --ep` and `moe serve --enable-expert-parallel`. The two differ
// only in what the flags need: under generate the last three mean something only with an interval, under
// serve every rebalance (interval, POST /admin/rebalance, scaling) uses them.

#include <CLI/CLI.hpp>
#include <string>

#include "engine/expert_parallel.h"

namespace moe::cli {

struct EplbFlags {
  CLI::Option* interval = nullptr;
  CLI::Option* window = nullptr;
  CLI::Option* redundant = nullptr;
  CLI::Option* min_gain = nullptr;
};

// The four options into `eplb`, each help text led by `scope` (the flag they belong to, e.g. "--ep: "); the
// interval's text goes on with `interval_help` (what 0 means there).
EplbFlags add_eplb_flags(CLI::App& cmd, engine::EplbOptions& eplb, const std::string& scope,
                         const std::string& interval_help);

}  // namespace moe::cli
