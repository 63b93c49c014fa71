#include "moe/core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace moe {

namespace {
thread_local bool tl_inside_pool = false;

int default_thread_count() {
  if (const char* env = std::getenv("MOE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
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
  static ThreadPool pool(default_thread_count());
  return pool;
}

void ThreadPool::run_chunks() {
  tl_inside_pool = true;
  for (;;) {
    int64_t begin;
    {
      std::lock_guard lock(mutex_);
      if (next_ >= n_ || error_) break;
      begin = next_;
      next_ = std::min(n_, next_ + grain_);
    }
    try {
      (*body_)(begin, std::min(n_, begin + grain_));
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  tl_inside_pool = false;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++busy_;
    }
    run_chunks();
    {
      std::lock_guard lock(mutex_);
      --busy_;
    }
    done_.notify_all();
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
  static std::mutex caller_mutex;
  std::lock_guard caller_lock(caller_mutex);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    grain_ = grain;
    next_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace moe
