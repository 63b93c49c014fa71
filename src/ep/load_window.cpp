#include "ep/load_window.h"

#include <algorithm>

#include "moe/core/check.h"

namespace moe::ep {

LoadWindow::LoadWindow(int n_layers, int n_experts, int window_steps)
    : n_layers_(n_layers), n_experts_(n_experts), window_steps_(window_steps) {
  MOE_CHECK(n_layers >= 1 && n_experts >= 1, "load window of {} layers x {} experts: both must be at least 1",
            n_layers, n_experts);
  MOE_CHECK(window_steps >= 1, "load window of {} steps: give --eplb-window-steps of at least 1",
            window_steps);
  const size_t cells = static_cast<size_t>(n_layers) * n_experts;
  ring_.assign(cells * window_steps, 0);
  open_.assign(cells, 0);
  totals_.assign(cells, 0);
}

void LoadWindow::record(int layer, std::span<const int32_t> topk_ids) {
  MOE_CHECK(layer >= 0 && layer < n_layers_, "load window: layer {} outside [0, {})", layer, n_layers_);
  int32_t* counts = open_.data() + static_cast<size_t>(layer) * n_experts_;
  for (int32_t e : topk_ids) {
    if (e < 0) continue;
    MOE_CHECK(e < n_experts_, "load window: layer {} routed to expert {} of {}", layer, e, n_experts_);
    ++counts[e];
  }
}

void LoadWindow::end_step() {
  const size_t cells = open_.size();
  int32_t* slot = ring_.data() + static_cast<size_t>(next_) * cells;
  // The slot holds the oldest step once the ring is full: it leaves the totals as the open step enters.
  for (size_t i = 0; i < cells; ++i) totals_[i] += int64_t{open_[i]} - slot[i];
  std::copy(open_.begin(), open_.end(), slot);
  std::fill(open_.begin(), open_.end(), 0);
  next_ = (next_ + 1) % window_steps_;
  steps_ = std::min(steps_ + 1, window_steps_);
}

std::vector<int64_t> LoadWindow::local(int layer) const {
  MOE_CHECK(layer >= 0 && layer < n_layers_, "load window: layer {} outside [0, {})", layer, n_layers_);
  const auto begin = totals_.begin() + static_cast<ptrdiff_t>(layer) * n_experts_;
  return {begin, begin + n_experts_};
}

std::vector<std::vector<int64_t>> LoadWindow::summed(Communicator& comm) const {
  std::vector<int64_t> all = totals_;  // [n_layers * n_experts]
  comm.allreduce_sum(all);
  std::vector<std::vector<int64_t>> layers(n_layers_);
  for (int l = 0; l < n_layers_; ++l)
    layers[l].assign(all.begin() + static_cast<ptrdiff_t>(l) * n_experts_,
                     all.begin() + static_cast<ptrdiff_t>(l + 1) * n_experts_);
  return layers;
}

}  // namespace moe::ep
