#pragma once
// A small fixed pool of worker threads for data-parallel loops. One pool per process, sized to the
// hardware threads (MOE_NUM_THREADS overrides), so that nested callers never oversubscribe the cores.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moe {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
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

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  int64_t next_ = 0;
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace moe
