#pragma once
// Adds the wall time of one part of a forward pass to ModelOptions::times, when the caller asked for it.

#include <chrono>
#include <utility>

#include "moe/model/causal_lm.h"

namespace moe::model {

// Runs f() and adds its seconds to times->*part (no clock read when times is null), times->fence run before
// each clock read where it is set.
template <class F>
decltype(auto) timed(ForwardTimes* times, double ForwardTimes::*part, F&& f) {
  if (!times) return std::forward<F>(f)();
  struct Add {
    ForwardTimes* times;
    double* slot;
    std::chrono::steady_clock::time_point start = now(times);
    ~Add() { *slot += std::chrono::duration<double>(now(times) - start).count(); }
    static std::chrono::steady_clock::time_point now(ForwardTimes* t) {
      if (t->fence) t->fence();
      return std::chrono::steady_clock::now();
    }
  } add{times, &(times->*part)};
  return std::forward<F>(f)();
}

}  // namespace moe::model
