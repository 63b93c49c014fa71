#pragma once
// A small fixed pool of worker threads for data-parallel loops. One pool per process, sized to the
// hardware threads (MOE_NUM_THREADS overrides), so that nested callers never oversubscribe the cores.
//
// Between loops the workers spin (with pause) for a bounded time before they sleep on a condition
// variable, and the caller spins the same way for the workers' last chunks: a MoE layer issues several
// loops per forward a few microseconds apart, and a sleeping thread's wake-up costs 5-25 µs on a VM.
// The bound (MOE_POOL_SPIN_US, default 100 µs; 0 never spins) keeps an idle pool from burning a core.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moe {

class ThreadPool {
 public:
  static constexpr std::chrono::microseconds kDefaultSpin{100};

  // n_threads counts the caller; spin: how long an idle thread polls for work (or a waiting caller for
  // the workers) before it sleeps.
  explicit ThreadPool(int n_threads, std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool.
  static ThreadPool& global();

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls body(begin, end) over [0, n) split into chunks of at most `grain` items, on all threads
  // (the caller included); returns when every chunk is done. The first exception thrown by a chunk is
  // rethrown here. Calls from inside a running body run serially on the calling thread.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

 private:
  void worker_loop();
  void run_chunks();

  std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::mutex caller_mutex_;  // one loop at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // The loop: written by the caller before it bumps generation_, read by the workers after they see it.
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  std::atomic<int64_t> next_{0};     // first unclaimed index
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_{0};         // workers inside the current loop
  std::atomic<bool> failed_{false};  // a chunk threw: claim no more
  std::atomic<bool> stop_{false};
  // Under mutex_:
  bool open_ = false;             // workers may still join the current loop
  int sleepers_ = 0;              // workers waiting on wake_
  bool caller_sleeping_ = false;  // the caller waits on done_
  std::exception_ptr error_;
};

}  // namespace moe
