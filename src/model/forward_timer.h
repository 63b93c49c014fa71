#pragma once
// Adds the wall time of one part of a forward pass to ModelOptions::times, when the caller asked for it.

#include <chrono>
#include <utility>

#include "moe/model/causal_lm.h"

namespace moe::model {

// Runs f() and adds its seconds to times->*part (no clock read when times is null).
template <class F>
decltype(auto) timed(ForwardTimes* times, double ForwardTimes::*part, F&& f) {
  if (!times) return std::forward<F>(f)();
  struct Add {
    double* slot;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Add() { *slot += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  } add{&(times->*part)};
  return std::forward<F>(f)();
}

}  // namespace moe::model
