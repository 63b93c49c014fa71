#pragma once
// The load window of elastic expert parallelism: per MoE layer, the (token, expert) pairs per logical
// expert over the last W steps, as a ring of per-step counts. Every rank records its own tokens' routing;
// the window is summed over the ranks by a collective only when a rebalance decision is due.
// NOTE: the ring holds W x layers x experts int32 counts (DeepSeek-V3, W = 1000: 58 layers x 256 experts,
// 59 MB); a step's count of one expert fits in int32 by far.

#include <cstdint>
#include <span>
#include <vector>

#include "ep/communicator.h"

namespace moe::ep {

class LoadWindow {
 public:
  // n_layers MoE layers (indices 0 .. n_layers-1, in the caller's numbering) of n_experts experts each,
  // over the last window_steps steps. Throws moe::Error for a size below 1.
  LoadWindow(int n_layers, int n_experts, int window_steps);

  // Adds this rank's routing of one forward of `layer` to the open step: topk_ids [n_tokens, top_k]
  // flattened, logical expert ids (-1: no expert; any other id outside [0, n_experts) throws).
  void record(int layer, std::span<const int32_t> topk_ids);
  // Closes the open step: it joins the window, and the oldest step leaves once window_steps are held.
  void end_step();

  int n_layers() const { return n_layers_; }
  int n_experts() const { return n_experts_; }
  int window_steps() const { return window_steps_; }
  // Closed steps in the window (at most window_steps).
  int steps() const { return steps_; }
  // This rank's pairs per expert of `layer` over the closed steps of the window: [n_experts].
  std::vector<int64_t> local(int layer) const;
  // Every rank's window summed: [n_layers][n_experts], on every rank. Collective: every rank calls it with
  // windows of the same sizes.
  std::vector<std::vector<int64_t>> summed(Communicator& comm) const;

 private:
  int n_layers_, n_experts_, window_steps_;
  int steps_ = 0;                // closed steps held
  int next_ = 0;                 // the ring slot the open step closes into
  std::vector<int32_t> ring_;    // [window_steps][n_layers][n_experts] closed steps
  std::vector<int32_t> open_;    // [n_layers][n_experts] the step being recorded
  std::vector<int64_t> totals_;  // [n_layers][n_experts] sum of the ring
};

}  // namespace moe::ep
