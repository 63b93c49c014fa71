#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <future>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "moe/core/check.h"

namespace moe {
namespace {

// Runs parallel_for(n, grain) and checks that the chunks cover [0, n) exactly once, each non-empty and at
// most `grain` long.
void check_cover(ThreadPool& pool, int64_t n, int64_t grain) {
  SCOPED_TRACE("pool " + std::to_string(pool.size()) + ", n " + std::to_string(n) + ", grain " + std::to_string(grain));
  std::unique_ptr<std::atomic<int>[]> hits(new std::atomic<int>[std::max<int64_t>(n, 1)]);
  for (int64_t i = 0; i < n; ++i) hits[i] = 0;
  std::atomic<int> bad_chunks{0};
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    if (!(0 <= begin && begin < end && end <= n && end - begin <= std::max<int64_t>(grain, 1))) ++bad_chunks;
    for (int64_t i = begin; i < std::min(end, n); ++i) ++hits[i];
  });
  EXPECT_EQ(bad_chunks.load(), 0);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += hits[i] != 1;
  EXPECT_EQ(wrong, 0) << "indices not visited exactly once";
}

TEST(ThreadPool, Size) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(4).size(), 4);
  EXPECT_EQ(ThreadPool(0).size(), 1);  // never fewer than the calling thread
  EXPECT_GE(ThreadPool::global().size(), 1);
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 12345})
      for (int64_t grain : {-5, 0, 1, 3, 64, 1000, 100000}) check_cover(pool, n, grain);
  }
  for (int64_t n : {1, 100, 4097}) check_cover(ThreadPool::global(), n, 16);
}

TEST(ThreadPool, RepeatedLoopsReuseWorkers) {
  ThreadPool pool(4);
  for (int round = 0; round < 500; ++round) check_cover(pool, 1 + round % 37, 1 + round % 5);
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  pool.parallel_for(64, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard lock(mutex);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_GT(seen.size(), 1u);
  EXPECT_LE(seen.size(), 4u);
}

TEST(ThreadPool, ExceptionsPropagate) {
  for (int threads : {1, 4}) {
    ThreadPool pool(threads);
    std::atomic<int> calls{0};
    try {
      pool.parallel_for(1000, 7, [&](int64_t begin, int64_t end) {
        ++calls;
        if (begin <= 500 && 500 < end) MOE_FAIL("chunk [{}, {}) failed", begin, end);
      });
      ADD_FAILURE() << "expected moe::Error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "chunk [497, 504) failed");
    }
    EXPECT_GE(calls.load(), 1);
    // Serial path (n <= grain), and a non-moe exception.
    EXPECT_THROW(pool.parallel_for(3, 10, [](int64_t, int64_t) { throw std::out_of_range("x"); }), std::out_of_range);
    // The pool still works afterwards.
    check_cover(pool, 1000, 7);
  }
}

TEST(ThreadPool, EveryChunkThrowing) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.parallel_for(10000, 1, [](int64_t, int64_t) { throw std::runtime_error("all"); }),
               std::runtime_error);
  check_cover(pool, 100, 1);
}

TEST(ThreadPool, NestedCallsRunSerially) {
  ThreadPool pool(4);
  constexpr int64_t kOuter = 16, kInner = 100;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  pool.parallel_for(kOuter, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      pool.parallel_for(kInner, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[o * kInner + i];
      });
      // The global pool nested inside this one works too.
      ThreadPool::global().parallel_for(2, 1, [](int64_t, int64_t) {});
    }
  });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
}

TEST(ThreadPool, NestedExceptionPropagates) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(8, 1,
                                 [&](int64_t, int64_t) {
                                   pool.parallel_for(8, 1, [](int64_t b, int64_t) {
                                     if (b == 5) MOE_FAIL("inner");
                                   });
                                 }),
               Error);
  check_cover(pool, 50, 2);
}

TEST(ThreadPool, ConcurrentCallersFromOutside) {
  ThreadPool pool(4);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 50; ++round) {
        const int64_t n = 100 + c * 17 + round;
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, 1 + c, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++hits[i];
        });
        for (auto& h : hits) failures += h.load() != 1;
      }
    });
  }
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(failures.load(), 0);
}

// Runs f on another thread; fails (and exits: a deadlocked pool cannot be joined) if it has not returned
// within `limit`.
template <class F>
void within(std::chrono::seconds limit, const char* what, F f) {
  std::packaged_task<void()> task(f);
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  if (done.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << what << ": still running after " << limit.count() << " s (deadlock or lost wake-up)";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  runner.join();
  done.get();
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Loops back to back (workers still spinning), after pauses longer than the spin (workers asleep), and
// with chunks longer than the spin (the caller sleeps until the workers finish), for pools that never
// spin, spin briefly, and spin longer than any pause here.
TEST(ThreadPool, SpinAndSleepPathsLoseNoWork) {
  using std::chrono::microseconds;
  for (const microseconds spin : {microseconds(0), microseconds(50), microseconds(2'000'000)})
    for (int threads : {2, 4}) {
      SCOPED_TRACE("spin " + std::to_string(spin.count()) + " us, " + std::to_string(threads) + " threads");
      within(std::chrono::seconds(60), "spin/sleep loops", [&] {
        ThreadPool pool(threads, spin);
        for (int round = 0; round < 300; ++round) {
          if (round % 50 == 10) std::this_thread::sleep_for(std::chrono::milliseconds(3));
          check_cover(pool, 1 + round % 41, 1 + round % 3);
        }
        // Chunks outlasting the spin: the caller waits on the condition variable and must be woken.
        std::atomic<int> slow{0};
        pool.parallel_for(threads, 1, [&](int64_t, int64_t) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          ++slow;
        });
        EXPECT_EQ(slow.load(), threads);
      });
    }
}

// A worker asleep on the condition variable wakes up for the next loop (no lost wake-up): with a spin of
// zero every loop after a pause must still be shared out.
TEST(ThreadPool, SleepingWorkersWakeForTheNextLoop) {
  within(std::chrono::seconds(60), "wake after sleep", [] {
    ThreadPool pool(2, std::chrono::microseconds(0));
    int shared = 0;
    for (int round = 0; round < 20; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::mutex mutex;
      std::set<std::thread::id> seen;
      pool.parallel_for(2, 1, [&](int64_t, int64_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // long enough for the worker to wake
        std::lock_guard lock(mutex);
        seen.insert(std::this_thread::get_id());
      });
      shared += seen.size() == 2;
    }
    // NOTE: not every round: on a loaded machine the worker may be scheduled after the caller took both.
    EXPECT_GE(shared, 10);
  });
}

// The spin is bounded: an idle pool sleeps instead of burning its cores.
TEST(ThreadPool, IdlePoolStopsSpinning) {
  ThreadPool pool(4, std::chrono::microseconds(1000));
  check_cover(pool, 100, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin
  const double cpu_before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cpu_used = process_cpu_seconds() - cpu_before;
  // Three workers spinning would use ~0.9 s; asleep they use nothing (other tests' pools are idle too).
  EXPECT_LT(cpu_used, 0.1) << "idle workers still spinning";
}

}  // namespace
}  // namespace moe
