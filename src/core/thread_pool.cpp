#include "core/thread_pool.h"

#include <algorithm>

#include "core/knobs.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace moe {

namespace {
thread_local bool tl_inside_pool = false;

using Clock = std::chrono::steady_clock;

int default_thread_count() {
  if (const auto n = knobs().num_threads) return static_cast<int>(*n);
  return std::max(1u, std::thread::hardware_concurrency());
}

std::chrono::microseconds default_spin() {
  const auto us = knobs().pool_spin_us;
  return us ? std::chrono::microseconds(*us) : ThreadPool::kDefaultSpin;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `ready` until it holds or `budget` has passed; returns its last value.
template <class Ready>
bool spin_until(const Ready& ready, std::chrono::microseconds budget) {
  if (budget.count() <= 0) return ready();
  const auto deadline = Clock::now() + budget;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    cpu_relax();
    // NOTE: the clock every 16 pauses (a pause is ~40-140 cycles): about 1 µs of slack on the budget.
    if (i % 16 == 0 && Clock::now() >= deadline) return ready();
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads, std::chrono::microseconds spin) : spin_(spin) {
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(default_thread_count(), default_spin());
  return pool;
}

void ThreadPool::run_chunks() {
  tl_inside_pool = true;
  for (;;) {
    if (failed_.load(std::memory_order_relaxed)) break;
    int64_t begin = next_.load(std::memory_order_relaxed);
    do {
      if (begin >= n_) break;
    } while (!next_.compare_exchange_weak(begin, std::min(n_, begin + grain_), std::memory_order_relaxed));
    if (begin >= n_) break;
    try {
      (*body_)(begin, std::min(n_, begin + grain_));
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
    }
  }
  tl_inside_pool = false;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(); }, spin_);
    {
      std::unique_lock lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      --sleepers_;
      if (stop_) return;
      seen = generation_.load();
      // NOTE: joining under the mutex, against the caller's closing under it: a worker that joins is one
      // the caller waits for, and none touches a loop (its body) after the caller has returned.
      if (!open_) continue;
      ++busy_;
    }
    run_chunks();
    if (--busy_ == 0) {
      std::lock_guard lock(mutex_);
      if (caller_sleeping_) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (tl_inside_pool || workers_.empty() || n <= grain) {
    // NOTE: chunks stay at most `grain` long here too: callers may size per-chunk scratch by it.
    for (int64_t begin = 0; begin < n; begin += grain) body(begin, std::min(n, begin + grain));
    return;
  }
  // NOTE: one loop at a time; a second caller waits here until the first has drained.
  std::lock_guard caller_lock(caller_mutex_);
  bool wake;
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    grain_ = grain;
    next_ = 0;
    failed_ = false;
    error_ = nullptr;
    open_ = true;
    ++generation_;
    wake = sleepers_ > 0;
  }
  if (wake) wake_.notify_all();
  run_chunks();
  {
    // Every chunk is claimed: no worker may join now; wait for those inside.
    std::lock_guard lock(mutex_);
    open_ = false;
  }
  if (!spin_until([&] { return busy_.load() == 0; }, spin_)) {
    std::unique_lock lock(mutex_);
    caller_sleeping_ = true;
    done_.wait(lock, [&] { return busy_.load() == 0; });
    caller_sleeping_ = false;
  }
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace moe
