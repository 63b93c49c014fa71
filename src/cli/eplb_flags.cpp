#include "eplb_flags.h"

namespace moe::cli {

EplbFlags add_eplb_flags(CLI::App& cmd, engine::EplbOptions& eplb, const std::string& scope,
                         const std::string& interval_help) {
  EplbFlags flags;
  flags.interval = cmd.add_option("--eplb-interval-steps", eplb.interval_steps,
                                  scope + "rebalance the placement every this many model steps (" + interval_help + ")")
                       ->check(CLI::NonNegativeNumber);
  flags.window = cmd.add_option("--eplb-window-steps", eplb.window_steps,
                                scope + "the load window of rebalancing, in steps (default 1000)")
                     ->check(CLI::PositiveNumber);
  flags.redundant = cmd.add_option("--num-redundant-experts", eplb.redundant_experts,
                                   scope + "spare expert slots per layer for replicas of hot experts (default 0)")
                        ->check(CLI::NonNegativeNumber);
  flags.min_gain = cmd.add_option("--eplb-min-gain", eplb.min_gain,
                                  scope +
                                      "move experts only when predicted max/mean rank load improves by at least "
                                      "this (default 0.05)")
                       ->check(CLI::NonNegativeNumber);
  return flags;
}

}  // namespace moe::cli
